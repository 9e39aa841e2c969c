"""The import graph of `tokensde` is acyclic, and the pure core imports no torch.

Every module under src/tokensde is parsed with `ast`; an edge `a -> b` is any import in `a` that
names module `b` of the package: at module level, inside functions (lazy imports) or under
`if TYPE_CHECKING:`, with relative imports resolved. `from pkg import name` is an edge to the
submodule `pkg.name` when there is one, else to `pkg` itself. The implicit import of a parent
package is not an edge (Python has it in `sys.modules` before the child runs).
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import tokensde

PACKAGE = "tokensde"
ROOT = Path(tokensde.__file__).resolve().parent


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package `__init__`) for every module of the package."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        package = parts[-1] == "__init__"
        name = ".".join((PACKAGE, *(parts[:-1] if package else parts)))
        out[name] = (path, package)
    return out


def _resolve(node: ast.ImportFrom, name: str, package: bool) -> str:
    """The absolute module an `ImportFrom` names (its `from` part)."""
    if node.level == 0:
        return node.module or ""
    here = name.split(".") if package else name.split(".")[:-1]
    base = here[: len(here) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Edges `module -> modules it imports`, within the package."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, package) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(node, name, package)
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src
                           for a in node.names]
            for t in targets:
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle `[a, b, ..., a]` of `graph`, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    assert "tokensde.sim.simulate" in graph["tokensde.analysis.pair_monte_carlo"]  # relative
    assert "tokensde.sweep.kinds" in graph["tokensde.sweep.engine"]  # inside a function
    assert "tokensde.plots.style" in graph["tokensde.plots.phase"]  # one level down
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# The layers, bottom first: a folder imports only from folders of a lower rank (or from itself).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_version", "_lazy", "model"),  # what is simulated: parameters, strategies, validation
    ("theory",),                 # exact results, numpy/scipy only
    ("sim",),                    # how it is simulated
    ("io",),                     # results on disk, the HTML report, progress bars
    ("analysis",),               # measurements of runs, Monte Carlo against theory, convergence
    ("sweep",),                  # parameter grids run cell by cell
    ("plots",),                  # figures from saved tables and results
    ("vit", "real", "meanfield"),  # applications built on the layers below
    ("study",),                  # every figure of the report as data
    ("cli",),                    # the command line, a thin shell
)
RANK = {folder: i for i, group in enumerate(LAYERS) for folder in group}


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_folder_has_a_layer():
    folders = {_folder(m) for m in import_graph()} - {""}
    assert folders <= set(RANK), sorted(folders - set(RANK))


def test_each_folder_imports_only_the_layers_below():
    bad = []
    for mod, targets in import_graph().items():
        here = _folder(mod)
        if not here:
            continue
        for t in targets:
            there = _folder(t)
            if there and there != here and RANK[there] >= RANK[here]:
                bad.append(f"{mod} -> {t}")
    assert not bad, "imports up or across the layers: " + ", ".join(sorted(bad))


def test_only_the_cli_imports_the_package_root():
    for mod, targets in import_graph().items():  # e.g. `from .. import simulate`
        assert PACKAGE not in targets or mod.startswith("tokensde.cli."), mod


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


# A leading underscore marks a name as internal to the package, not to its module: the modules of
# tokensde share internal names (every name that no `__all__` lists has one,
# tests/test_public_names.py); only the scripts beside the package keep to the public names.


# --- the scripts beside the package use its public names only ----------------------------------

REPO = ROOT.parents[1]
SCRIPTS = sorted([*REPO.glob("diagnostics/*.py"), *REPO.glob("benchmarks/*.py")])

# Names the scripts import that are not public yet (none now: every module they reach is in the
# API reference). Add one only with the reason, and remove it once it is public.
PENDING_PUBLIC: set[str] = set()


def _script_imports(script: Path) -> list[tuple[str, str | None]]:
    """`(module, name)` of each import of the package in `script`; name None for `import module`."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
            out += [(node.module or "", a.name) for a in node.names]
    return out


def _rendered_modules() -> set[str]:
    """The modules the API reference renders whole (`::: tokensde.x.y` in docs/api/)."""
    text = "\n".join(p.read_text() for p in sorted((REPO / "docs" / "api").glob("*.md")))
    return set(re.findall(r"^::: (tokensde[\w.]*)$", text, re.M))


def _public_module(module: str, rendered: set[str]) -> bool:
    """A module is public when it is a layer, the reference renders it or its package exports it."""
    if module.count(".") <= 1 or module in rendered:
        return True
    parent, _, last = module.rpartition(".")
    package = importlib.import_module(parent)
    return (last in getattr(package, "__all__", ())
            and getattr(package, last) is importlib.import_module(module))


def _is_public(module: str, name: str | None, rendered: set[str]) -> bool:
    """Whether `from module import name` (or `import module`) reaches a public name: one in the
    `__all__` of the root or of the layer (the same object), a module the reference renders whole
    or its package exports, or a name such a module offers (its `__all__`, else no underscore)."""
    if name is None:
        return _public_module(module, rendered)
    if _private(name):
        return False
    mod = importlib.import_module(module)
    if not hasattr(mod, name):  # a submodule
        return _public_module(f"{module}.{name}", rendered)
    layer = importlib.import_module(".".join(module.split(".")[:2]))
    if name in getattr(layer, "__all__", ()) and getattr(layer, name) is getattr(mod, name):
        return True
    return (module.count(".") >= 2 and _public_module(module, rendered)
            and name in getattr(mod, "__all__", [n for n in vars(mod) if not _private(n)]))


def test_no_private_name_is_imported_by_the_scripts():
    bad = [f"{s.relative_to(REPO)}: {m}.{n}" for s in SCRIPTS for m, n in _script_imports(s)
           if n is not None and _private(n)]
    assert not bad, "private names imported by diagnostics/ or benchmarks/: " + ", ".join(bad)


def test_the_scripts_use_only_public_names():
    rendered = _rendered_modules()
    found = {(s.relative_to(REPO), m if n is None else f"{m}.{n}", _is_public(m, n, rendered))
             for s in SCRIPTS for m, n in _script_imports(s)}
    bad = sorted(f"{s}: {full}" for s, full, public in found
                 if not public and full not in PENDING_PUBLIC)
    assert not bad, ("names outside the public API (a layer's `__all__` or a module of the API "
                     "reference) imported by diagnostics/ or benchmarks/: " + ", ".join(bad))
    done = sorted(PENDING_PUBLIC - {full for _, full, public in found if not public})
    assert not done, f"public now or no longer imported, remove from PENDING_PUBLIC: {done}"


def test_nothing_outside_the_cli_imports_it():
    graph = import_graph()
    for mod, targets in graph.items():
        if mod == "tokensde.cli" or mod.startswith("tokensde.cli."):
            continue
        into_cli = sorted(t for t in targets if t == "tokensde.cli" or t.startswith("tokensde.cli."))
        assert not into_cli, f"{mod} imports {into_cli}"
    # nor do the scripts beside the package (they use tokensde.study)
    for script in SCRIPTS:
        for node in ast.walk(ast.parse(script.read_text(), str(script))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.startswith("tokensde.cli")], script


def test_plots_only_draw():
    graph = import_graph()
    simulators = {"tokensde.sim.simulate", "tokensde.sim.gram", "tokensde.analysis.pair_monte_carlo",
                  "tokensde.sweep.two_token", "tokensde.study"}
    for mod, targets in graph.items():
        if mod.startswith("tokensde.plots"):
            assert not targets & simulators, f"{mod} imports {sorted(targets & simulators)}"


def test_model_and_theory_do_not_import_torch():
    pure = sorted(m for m in import_graph() if _folder(m) in ("model", "theory", "_version"))
    code = ("import sys, tokensde, tokensde.analysis.stats, " + ", ".join(pure)
            + "; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
