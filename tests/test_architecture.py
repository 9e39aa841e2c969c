"""docs/ARCHITECTURE.md matches the tree: every module it names exists, and every folder of
`src/tokensde` appears in its layout.

A module is named three ways on that page: a dotted path in backticks (`tokensde.sim.loop`, or a
name inside such a module, `tokensde.sim.loop._march`), a file path (`sim/loop.py`,
`study/sweeps/*.toml`), and a folder's line of the layout block (`sim/   ...: simulate, layers`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "tokensde"
PAGE = (REPO / "docs" / "ARCHITECTURE.md").read_text()


def _module_path(parts: list[str]) -> Path | None:
    """The file or package of `tokensde.<parts>`, or None."""
    here = SRC.joinpath(*parts)
    if here.with_suffix(".py").is_file():
        return here.with_suffix(".py")
    if (here / "__init__.py").is_file() or (here.is_dir() and any(here.glob("*.py"))):
        return here
    return None


def _names_in(path: Path) -> set[str]:
    """The top-level names a module (or a package's modules) defines or imports, read with ast."""
    files = [path] if path.suffix == ".py" else sorted(path.glob("*.py"))
    names: set[str] = {f.stem for f in files}
    for f in files:
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports (lazy exports)
                names |= {(a.asname or a.name) for n in node.body
                          if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    return names


def _dotted() -> list[str]:
    return sorted(set(re.findall(r"`(tokensde(?:\.\w+)+)", PAGE)))


@pytest.mark.parametrize("name", _dotted())
def test_every_dotted_module_exists(name):
    parts = name.split(".")[1:]
    for cut in range(len(parts), -1, -1):
        path = _module_path(parts[:cut])
        if path is not None:
            rest = parts[cut:]
            assert len(rest) <= 1, f"{name}: {'.'.join(rest)} is not a module of {path}"
            if rest:
                assert rest[0] in _names_in(path), f"{name}: {path.relative_to(REPO)} has no {rest[0]}"
            return
    pytest.fail(f"docs/ARCHITECTURE.md names {name}, which is not in src/tokensde")


def _layout() -> dict[str, list[str]]:
    """folder -> the module names on its lines of the layout block (after the colon, outside
    brackets)."""
    block = PAGE[PAGE.index("```\nsrc/tokensde/"):]
    block = block[:block.index("\n```", 4)]
    texts: dict[str, str] = {}
    folder = None
    for line in block.splitlines()[2:]:
        m = re.match(r"  (\w+)/\s+(.*)", line)
        if m:
            folder = m.group(1)
            texts[folder] = m.group(2)
        elif folder is not None and line.startswith(" " * 16):
            texts[folder] += " " + line.strip()
        else:
            folder = None
    out = {}
    for folder, text in texts.items():
        while re.search(r"\([^()]*\)", text):
            text = re.sub(r"\([^()]*\)", "", text)  # remarks in brackets
        text = text.split(":", 1)[1] if ":" in text else text
        out[folder] = re.findall(r"(?<![\w/.])([a-z_][a-z0-9_]*)\b(?![/.])", text)
    return out


LAYOUT = _layout()
PROSE = {"and", "the", "strategy", "families"}  # the words of the layout that are not modules


def test_every_folder_of_the_package_is_in_the_layout():
    folders = {p.parent.name for p in SRC.glob("*/*.py")} - {"__pycache__"}
    assert folders <= set(LAYOUT), f"missing from the layout: {sorted(folders - set(LAYOUT))}"
    assert set(LAYOUT) <= folders, f"not in src/tokensde: {sorted(set(LAYOUT) - folders)}"


@pytest.mark.parametrize("folder", sorted(LAYOUT))
def test_every_module_of_the_layout_exists(folder):
    modules = {p.stem for p in (SRC / folder).glob("*.py")} | {
        p.name for p in (SRC / folder).iterdir() if p.is_dir() and p.name != "__pycache__"}
    words = set(LAYOUT[folder])
    assert words & modules, f"{folder}/: the layout names none of its modules"
    unknown = words - modules - PROSE
    assert not unknown, f"{folder}/: the layout names {sorted(unknown)}, which are not modules"


def test_every_file_path_exists():
    paths = set(re.findall(r"`?((?:src/tokensde/|tests/|cli/|sim/|study/|vit/|model/|theory/)"
                           r"[\w/<>*.-]*\.(?:py|toml))`?", PAGE))
    assert paths
    missing = []
    for path in sorted(paths):
        if "<" in path:
            continue  # a pattern such as cli/<name>.py
        root = REPO if path.startswith(("src/", "tests/")) else SRC
        if not list(root.glob(path)):
            missing.append(path)
    assert missing == []
