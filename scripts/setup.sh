#!/usr/bin/env bash
# Install everything tokensde needs on a Debian machine: system packages, then the package itself.
#   scripts/setup.sh          # apt packages (if missing), torch==2.13.0, pip install -e ".[dev]"
# torch: the package accepts a range (pyproject.toml); the tests run on the version pinned here,
# installed first so that the range is already met (an unpinned torch would pull a CUDA build of
# several GB). TOKENSDE_TORCH_INDEX=URL takes torch from another package index (a CPU-only one).
# System packages: chromium (browser test of the HTML report), dataset-fashion-mnist (ViT data).
#
# A second call is fast: apt runs only for a missing package (or with TOKENSDE_APT_UPDATE=1), and
# pip only when the stamp .setup-stamp (ignored by git) does not match this interpreter, the pinned
# torch, pyproject.toml and this script, or when tokensde does not import from this checkout.
# TOKENSDE_SETUP_FORCE=1 runs pip in any case.
set -euo pipefail
cd "$(dirname "$0")/.."
APT_PACKAGES=(chromium dataset-fashion-mnist)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ] || [ "${TOKENSDE_APT_UPDATE:-0}" = 1 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update
  [ "${#missing[@]}" -eq 0 ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
PY="${PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
STAMP=.setup-stamp
want="$("$PY" -c 'import sys; print(sys.executable)') $TORCH_PIN ${TOKENSDE_TORCH_INDEX:-} $(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
here="$(pwd -P)/src/tokensde"
installed() {
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] || return 1
  # the editable install must point at this checkout (not at another clone)
  got="$(cd /tmp && "$PY" -c 'import os, tokensde; print(os.path.dirname(os.path.realpath(tokensde.__file__)))' 2>/dev/null)" || return 1
  [ "$got" = "$here" ]
}
if [ "${TOKENSDE_SETUP_FORCE:-0}" != 1 ] && installed; then
  echo "tokensde already installed from this checkout (scripts/setup.sh: nothing to do)"
  exit 0
fi
"$PY" -m pip install --quiet "$TORCH_PIN" ${TOKENSDE_TORCH_INDEX:+--index-url "$TOKENSDE_TORCH_INDEX"}
"$PY" -m pip install --quiet -e ".[dev]"
echo "$want" > "$STAMP"
echo "tokensde installed: $("$PY" -c 'import tokensde; print(tokensde.__version__)')"
