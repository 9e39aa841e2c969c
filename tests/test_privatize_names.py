"""scripts/privatize_names.py on a small tree: what it renames, what it leaves, that a second run
changes nothing."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("privatize_names", REPO / "scripts" / "privatize_names.py")
assert _spec is not None and _spec.loader is not None
tool = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = tool  # its dataclasses look their module up
_spec.loader.exec_module(tool)

TREE = {
    "src/tokensde/__init__.py": "",
    "src/tokensde/layer/__init__.py": '__all__ = ["Listed"]\n',
    "src/tokensde/layer/mod.py": '''\
"""Uses `mod.helper` and `tokensde.layer.mod.helper`."""

LIMIT = 3


class Listed:
    size: int = LIMIT


def helper(x, helper_arg=LIMIT):
    global LIMIT
    return x + LIMIT


def shadow(helper):
    LIMIT = 2
    return helper(LIMIT)


def shown():
    return helper(1, helper_arg=2)
''',
    "src/tokensde/layer/other.py": '''\
from . import mod
from .mod import LIMIT, helper


def use(obj):
    return helper(LIMIT) + mod.helper(1) + obj.helper + dict(helper=1)["helper"]
''',
    "tests/test_x.py": '''\
import tokensde.layer.mod as m


def test_it(monkeypatch):
    monkeypatch.setattr(m, "helper", len)
    monkeypatch.setattr("tokensde.layer.mod.LIMIT", 4)
    assert m.shown() == 1
''',
    "docs/api/layer.md": "::: tokensde.layer.mod.helper\n",
    "README.md": "Call `tokensde.layer.mod.shown()`.\n",
}


def _run(root: Path, dry_run: bool = False) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tool.run(root, dry_run)
    return out.getvalue()


def _tree(tmp_path: Path) -> Path:
    for rel, text in TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_the_tool_renames_the_references_and_nothing_else(tmp_path):
    root = _tree(tmp_path)
    report = _run(root)
    mod = (root / "src/tokensde/layer/mod.py").read_text()
    assert "_LIMIT = 3" in mod and "size: int = _LIMIT" in mod and "class Listed:" in mod
    assert "def _helper(x, helper_arg=_LIMIT):\n    global _LIMIT\n    return x + _LIMIT" in mod
    # a parameter and a function-local variable of the same names stay
    assert "def _shadow(helper):\n    LIMIT = 2\n    return helper(LIMIT)" in mod
    assert "return _helper(1, helper_arg=2)" in mod  # the keyword stays
    assert "`mod._helper` and `tokensde.layer.mod._helper`" in mod
    other = (root / "src/tokensde/layer/other.py").read_text()
    assert "from .mod import _LIMIT, _helper" in other
    assert ("_helper(_LIMIT) + mod._helper(1) + obj.helper + dict(helper=1)[\"helper\"]"
            in other)
    test = (root / "tests/test_x.py").read_text()
    assert 'setattr(m, "_helper", len)' in test and '"tokensde.layer.mod._LIMIT"' in test
    assert (root / "docs/api/layer.md").read_text() == "::: tokensde.layer.mod._helper\n"
    assert (root / "README.md").read_text() == TREE["README.md"]  # shown: kept, reported
    assert "def shown():" in mod and "tokensde.layer.mod:shown  (README.md)" in report
    assert "tokensde.layer.mod: 3" in report  # LIMIT, helper, shadow
    assert _run(root).startswith("names that look public and no __all__ lists: 1; renamed: 0")


def test_a_second_run_changes_nothing_and_a_clash_is_skipped(tmp_path):
    root = _tree(tmp_path)
    path = root / "src/tokensde/layer/other.py"
    path.write_text(path.read_text() + "\n\ndef _helper():\n    pass\n")
    report = _run(root)
    assert "tokensde.layer.mod:helper: clash: tokensde.layer.other already uses _helper" in report
    assert "def helper(x" in (root / "src/tokensde/layer/mod.py").read_text()
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    again = _run(root)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    assert "renamed: 0;" in again and "files changed: 0" in again
