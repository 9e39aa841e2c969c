"""How tokensde installs: the dependencies and extras of pyproject.toml, the torch pin of the
setup script, package data that exists, and scikit-learn needed only by the ViT digits.

- torch is a range in the package metadata (so tokensde installs beside another torch); the tested
  version is pinned only in scripts/setup.sh, which installs it before the package;
- scikit-learn lives in the `vit` extra (and through `all` in `dev`); every import of it is lazy,
  and without it the library and the non-ViT commands work while `--dataset digits` says in one
  line which extra to install.

`scripts/check_wheel.sh` (run by CI) builds the wheel and runs it from a clean venv.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
TESTED_TORCH = "2.13.0"


def _reqs(specs: list[str]) -> dict[str, Requirement]:
    return {Requirement(s).name: Requirement(s) for s in specs}


def _extra(name: str, seen: frozenset[str] = frozenset()) -> dict[str, Requirement]:
    """The requirements of extra `name`, with the extras it names of tokensde itself expanded."""
    out: dict[str, Requirement] = {}
    for spec in PROJECT["optional-dependencies"][name]:
        req = Requirement(spec)
        if req.name == PROJECT["name"]:
            for sub in sorted(req.extras - seen - {name}):
                out |= _extra(sub, seen | {name})
        else:
            out[req.name] = req
    return out


def test_torch_is_a_range_that_holds_the_tested_version():
    torch = _reqs(PROJECT["dependencies"])["torch"]
    assert not any(s.operator in ("==", "===") for s in torch.specifier), torch
    assert torch.specifier.contains(Version(TESTED_TORCH))
    assert any(s.operator == "<" for s in torch.specifier), f"{torch}: give an upper bound"


def test_setup_pins_torch_before_the_package():
    script = (REPO / "scripts" / "setup.sh").read_text()
    pin, editable = script.find(f"torch=={TESTED_TORCH}"), script.find('-e ".[dev]"')
    assert 0 <= pin < editable, "setup.sh must install the tested torch before the package"


def test_readme_states_the_torch_range_and_the_tested_version():
    readme = (REPO / "README.md").read_text()
    torch = str(_reqs(PROJECT["dependencies"])["torch"].specifier)
    parts = sorted(torch.split(","))
    assert all(p in readme.replace(" ", "") for p in parts), f"README should state torch {torch}"
    assert f"torch {TESTED_TORCH}" in readme


def test_scikit_learn_is_in_the_vit_extra_only():
    assert "scikit-learn" not in _reqs(PROJECT["dependencies"])
    assert "scikit-learn" in _extra("vit")
    assert {"scikit-learn", "ray", "transformers"} <= set(_extra("all"))
    assert set(_extra("all")) | {"pytest", "mkdocs-material"} <= set(_extra("dev"))


def test_package_data_exists():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for pattern in data["package-data"]["tokensde"]:
        assert list((REPO / "src" / "tokensde").glob(pattern)), f"package data {pattern} matches nothing"


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:  # module level only: imports inside functions are lazy
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_scikit_learn_is_imported_lazily():
    eager = [str(p.relative_to(REPO)) for p in (REPO / "src").rglob("*.py")
             if "sklearn" in _top_level_imports(p)]
    assert eager == []
    lazy = [p for p in (REPO / "src").rglob("*.py") if re.search(r"^\s+from sklearn", p.read_text(), re.M)]
    assert lazy, "the digits loader imports sklearn inside a function"


def _without_sklearn(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the `tokensde` command line in a fresh process where `import sklearn` fails."""
    code = ("import sys; sys.modules['sklearn'] = None\n"
            "import tokensde, tokensde.vit, tokensde.sim\n"
            "assert 'sklearn' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            "from tokensde.cli import main\n"
            f"sys.argv = ['tokensde', *{list(args)!r}]\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src"),
                               "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"})


@pytest.mark.slow
def test_the_library_and_cli_work_without_scikit_learn():
    assert _without_sklearn("--help").returncode == 0
    out = _without_sklearn("two-token", "prob", "--beta", "1", "--d", "3", "--rho0", "0")
    assert out.returncode == 0, out.stderr
    assert "P_anti" in out.stdout


@pytest.mark.slow
def test_the_digits_say_which_extra_to_install(tmp_path):
    out = _without_sklearn("vit", "geometry", "--dataset", "digits", "--images", "2",
                           "--seeds", "1", "--out", str(tmp_path / "g"))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "tokensde[vit]" in lines[0], out.stderr
