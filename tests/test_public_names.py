"""The public face is the API. A top-level name that looks public (no leading underscore, in a
module whose path has none) is listed in an `__all__` (scripts/privatize_names.py gives the others
their underscore, everywhere they are used), and every name an `__all__` lists is documented on
the API reference pages (docs/api/*.md), as mkdocstrings renders their `:::` blocks."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import tokensde

ROOT = Path(tokensde.__file__).parent
API_PAGES = ROOT.parents[1] / "docs" / "api"
# 960 before the names used only in their own module took a leading underscore (version 0.1.0),
# 681 before scripts/privatize_names.py, 0 after (the 31 names the user pages show were listed
# in their layers' `__all__` and documented).


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


def test_every_name_that_looks_public_is_listed():
    extra = set(looks_public_not_listed())
    assert not extra, (
        f"{len(extra)} names look public but no __all__ lists them: give an internal name a "
        "leading underscore (scripts/privatize_names.py does it everywhere), or list it in its "
        f"layer's __all__ and document it: {extra}")


def test_the_count_sees_a_new_public_looking_name(tmp_path, monkeypatch):
    """The check can fail: one more unlisted name in a module is counted."""
    fake = tmp_path / "tokensde"
    (fake / "theory").mkdir(parents=True)
    text = (ROOT / "theory" / "two_tokens.py").read_text()
    (fake / "theory" / "two_tokens.py").write_text(text)
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "ROOT", fake)
    before = len(looks_public_not_listed())
    (fake / "theory" / "two_tokens.py").write_text(text + "\n\ndef looks_public():\n    pass\n")
    assert len(looks_public_not_listed()) == before + 1


# ---- every name an `__all__` lists is documented on the API pages

def _module_path(module: str) -> Path | None:
    """The file of a dotted module of the package (`tokensde.sim.gram`), None if there is none."""
    parts = module.split(".")[1:]
    rel = Path(*parts)
    for path in (ROOT / rel / "__init__.py", *([ROOT / rel.with_suffix(".py")] if parts else [])):
        if path.is_file():
            return path
    return None


def _origin(module: str, name: str, depth: int = 0) -> str:
    """Where `module.name` is defined: `module:name` of its definition, or the dotted name of a
    submodule, following `from ... import` (those under `if TYPE_CHECKING:` too)."""
    path = _module_path(module)
    submodule = f"{module}.{name}" if _module_path(f"{module}.{name}") else f"{module}:{name}"
    if path is None or depth > 20:
        return submodule
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    for node in [*tree.body, *(n for b in tree.body if isinstance(b, ast.If) for n in b.body)]:
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if (a.asname or a.name) == name:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = (".".join([*base, *([node.module] if node.module else [])])
                              if node.level else str(node.module))
                    return _origin(source, a.name, depth + 1)
    return submodule


def _listed(module: str) -> list[str]:
    """The `__all__` of a module ([] when it has none)."""
    path = _module_path(module)
    return [] if path is None else sorted(_module_names(path)[1])


def _rendered(page: str) -> set[str]:
    """What the `:::` blocks of one page render, as `_origin` names: a module block its public
    top-level names and its `__all__` (submodules are not rendered: show_submodules is off),
    an object block that object; the module block itself names the module."""
    out: set[str] = set()
    for target in re.findall(r"^:::\s*(\S+)", page, flags=re.M):
        path = _module_path(target)
        if path is None:
            module, _, name = target.rpartition(".")
            out.add(_origin(module, name))
            continue
        out.add(target)
        names = {n for n in _module_names(path)[0] if not n.startswith("_")}
        out |= {_origin(target, n) for n in names | set(_listed(target))
                if _module_path(f"{target}.{n}") is None}
    return out


def undocumented_listed() -> list[str]:
    """`module:name` of each name an `__all__` of a public module lists that no API page
    renders; a name with a leading underscore (hidden by the filters) needs a mention in
    backquotes on an API page."""
    pages = "\n".join(p.read_text() for p in sorted(API_PAGES.glob("*.md")))
    shown = _rendered(pages)
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.parts[-1] == "__init__" else rel.parts
        if any(p.startswith("_") for p in parts):
            continue
        module = ".".join(parts)
        for name in _listed(module):
            found = (f"`{module}.{name}`" in pages or f"`{name}`" in pages if name.startswith("_")
                     else _origin(module, name) in shown)
            if not found:
                missing.append(f"{module}:{name}")
    return missing


def test_every_listed_name_is_documented():
    missing = undocumented_listed()
    assert missing == [], (
        f"{len(missing)} names an __all__ lists are on no API page (docs/api/*.md): add a ::: "
        f"block for them or their module: {missing}")


def test_the_documentation_check_sees_a_missing_block(tmp_path, monkeypatch):
    """The check can fail: without the page of `tokensde.sweep`, its names are missing."""
    for page in API_PAGES.glob("*.md"):
        if page.name != "sweep.md":
            (tmp_path / page.name).write_text(page.read_text())
    monkeypatch.setattr(sys.modules[__name__], "API_PAGES", tmp_path)
    missing = undocumented_listed()
    assert "tokensde.sweep:get_kind" in missing and "tokensde.sweep:SweepConfig" in missing
    assert "tokensde.sweep:run_sweep" not in missing  # the root's, documented on the index
    assert not any(m.startswith("tokensde.sim:") for m in missing)
