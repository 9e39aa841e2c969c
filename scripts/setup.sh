#!/usr/bin/env bash
# Install everything tokensde needs on a Debian machine: system packages, then the package itself.
#   scripts/setup.sh          # apt packages (if missing), torch==2.13.0, pip install -e ".[dev]"
# torch: the package accepts a range (pyproject.toml); the tests run on the version pinned here,
# installed first so that the range is already met (an unpinned torch would pull a CUDA build of
# several GB). TOKENSDE_TORCH_INDEX=URL takes torch from another package index (a CPU-only one).
# System packages: chromium (browser test of the HTML report), dataset-fashion-mnist (ViT data).
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
"$PY" -m pip install --quiet "$TORCH_PIN" ${TOKENSDE_TORCH_INDEX:+--index-url "$TOKENSDE_TORCH_INDEX"}
"$PY" -m pip install --quiet -e ".[dev]"
echo "tokensde installed: $("$PY" -c 'import tokensde; print(tokensde.__version__)')"
