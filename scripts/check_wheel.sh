#!/usr/bin/env bash
# Build the wheel, install it into a clean virtual environment and run `tokensde --help` there.
#   scripts/check_wheel.sh            # exit 0 when the installed wheel works, non-zero otherwise
# The environment sees the packages that scripts/setup.sh installed (--system-site-packages), so
# torch and the other dependencies are reused and nothing is downloaded (pip runs with
# --no-index). The check runs outside the checkout, so the wheel's copy of tokensde is the one
# imported, not src/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tokensde-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# build from a copy of the files that make the package (so the checkout gets no build/ folder and
# no stale file of an old build can slip in), without isolation: setuptools comes from the
# environment, so no index is needed
mkdir "$WORK/tree"
cp pyproject.toml README.md "$WORK/tree/"
[ ! -f LICENSE ] || cp LICENSE "$WORK/tree/"
tar -C . --exclude=__pycache__ --exclude='*.egg-info' -cf - src | tar -C "$WORK/tree" -xf -
"$PY" -m pip wheel --quiet --no-deps --no-build-isolation -w "$WORK/dist" "$WORK/tree" >/dev/null
wheels=("$WORK"/dist/tokensde-*.whl)
[ -f "${wheels[0]}" ] || { echo "check_wheel: no wheel was built" >&2; exit 1; }
WHEEL="${wheels[0]}"

"$PY" -m venv --system-site-packages "$WORK/venv"
VPY="$WORK/venv/bin/python"
# the wheel's dependencies must be met by what is installed already (--no-index: no download)
"$VPY" -m pip install --quiet --no-index --ignore-installed --no-deps "$WHEEL"
"$VPY" - "$WHEEL" <<'EOF'
import sys
from importlib.metadata import distribution

from packaging.requirements import Requirement
from packaging.version import Version

missing = []
for spec in distribution("tokensde").requires or []:
    req = Requirement(spec)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # an extra's requirement
    try:
        have = distribution(req.name).version
    except Exception:
        missing.append(f"{req} (not installed)")
        continue
    if not req.specifier.contains(Version(have), prereleases=True):
        missing.append(f"{req} (have {have})")
if missing:
    sys.exit("check_wheel: the wheel's dependencies are not met: " + "; ".join(missing))
EOF

cd "$WORK"
where="$("$VPY" -c 'import tokensde; print(tokensde.__file__)')"
case "$where" in
  "$WORK/venv/"*) ;;
  *) echo "check_wheel: tokensde was imported from $where, not from the wheel" >&2; exit 1 ;;
esac
"$WORK/venv/bin/tokensde" --help >"$WORK/help.txt"
grep -q "simulate" "$WORK/help.txt" || { echo "check_wheel: tokensde --help lacks its commands" >&2; exit 1; }
"$WORK/venv/bin/tokensde" --version
"$VPY" - <<'EOF'
from importlib.resources import files

# the package data (sweep files) came with the wheel
for folder in ("study/sweeps", "vit/sweeps"):
    tomls = [p.name for p in files("tokensde").joinpath(folder).iterdir() if p.name.endswith(".toml")]
    assert tomls, f"the wheel has no {folder}/*.toml"
assert files("tokensde").joinpath("py.typed").is_file(), "the wheel has no py.typed"
EOF
echo "check_wheel: $(basename "$WHEEL") installs into a clean venv and tokensde --help works"
