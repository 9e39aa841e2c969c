#!/usr/bin/env bash
# Install everything tokensde needs on a Debian machine: system packages, then the package itself.
#   scripts/setup.sh          # apt packages (if missing) + pip install -e ".[dev]"
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
"$PY" -m pip install --quiet -e ".[dev]"
echo "tokensde installed: $("$PY" -c 'import tokensde; print(tokensde.__version__)')"
