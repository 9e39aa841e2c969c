"""The public face: how many top-level names look public (no leading underscore, in a module
whose path has none) without being listed in any `__all__`. Such a name is internal all the same
(docs/api/index.md), but looks like API; the count may only go down."""

from __future__ import annotations

import ast
from pathlib import Path

import tokensde

ROOT = Path(tokensde.__file__).parent
# 960 before the names used only in their own module took a leading underscore (version 0.1.0)
LOOKS_PUBLIC_MAX = 682


def _module_names(path: Path) -> tuple[set[str], set[str]]:
    """(top-level names without a leading underscore, the module's `__all__`)."""
    names: set[str] = set()
    listed: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id == "__all__":
                    listed = set(ast.literal_eval(node.value))
                elif isinstance(t, ast.Name):
                    names.add(t.id)
    return {n for n in names if not n.startswith("_")}, listed


def looks_public_not_listed() -> list[str]:
    """`module:name` of every name that looks public and is in no `__all__` of the package."""
    found: dict[str, set[str]] = {}
    listed: set[str] = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        names, in_all = _module_names(path)
        listed |= in_all
        if not any(p.startswith("_") and p != "__init__.py" for p in rel.parts):
            found[".".join(rel.with_suffix("").parts)] = names
    return sorted(f"{m}:{n}" for m, names in found.items() for n in names - listed)


def test_names_that_look_public_but_are_not_listed_do_not_grow():
    extra = looks_public_not_listed()
    assert len(extra) <= LOOKS_PUBLIC_MAX, (
        f"{len(extra)} names look public but no __all__ lists them (at most {LOOKS_PUBLIC_MAX}): "
        "give a new internal name a leading underscore, or list it in its layer's __all__ "
        f"and document it; e.g. {extra[-5:]}")


def test_the_count_sees_a_new_public_looking_name(tmp_path, monkeypatch):
    """The check can fail: one more unlisted name in a module is counted."""
    import sys

    fake = tmp_path / "tokensde"
    (fake / "theory").mkdir(parents=True)
    text = (ROOT / "theory" / "two_tokens.py").read_text()
    (fake / "theory" / "two_tokens.py").write_text(text)
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "ROOT", fake)
    before = len(looks_public_not_listed())
    (fake / "theory" / "two_tokens.py").write_text(text + "\n\ndef looks_public():\n    pass\n")
    assert len(looks_public_not_listed()) == before + 1
