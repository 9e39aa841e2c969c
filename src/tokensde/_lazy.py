"""Lazy exports (PEP 562): a package's public names are imported when first asked for.

A package lists its exports once, as imports under `if TYPE_CHECKING:` (what type checkers and
the documentation read), and hands its `__getattr__` and `__dir__` to `lazy_exports`, which
reads that block and imports a module only when one of its names is used. So `import tokensde`
and the torch-free layers never import torch.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any


def exported_imports(path: str | Path) -> dict[str, tuple[str, str | None]]:
    """The imports under `if TYPE_CHECKING:` at the top level of the module at `path`: name ->
    (relative module, attribute), attribute None for a submodule (`from . import theory`)."""
    tree = ast.parse(Path(path).read_text(), str(path))
    out: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            continue
        for imp in node.body:
            if isinstance(imp, ast.ImportFrom) and imp.level > 0:
                base = "." * imp.level + (imp.module or "")
                for a in imp.names:
                    name = a.asname or a.name
                    out[name] = (base + a.name, None) if imp.module is None else (base, a.name)
    return out


def lazy_exports(package: str, path: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for the package `package` whose `__init__` is at `path`."""
    where = exported_imports(path)

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = where[name]
        found = importlib.import_module(module, package)
        value = found if attribute is None else getattr(found, attribute)
        setattr(sys.modules[package], name, value)  # the next access skips this function
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    shadowed = {name: f"{package}.{name}" for name, (module, attribute) in where.items()
                if attribute == name and module == "." + name}
    if shadowed:
        _SHADOWED[package] = shadowed
        sys.modules[package].__class__ = _ExportFirst
    return getattr_, dir_


# package -> {exported name: the submodule of that name that defines it}
_SHADOWED: dict[str, dict[str, str]] = {}


class _ExportFirst(types.ModuleType):
    """A package that exports a function under the name of the submodule defining it
    (`tokensde.sim.simulate`): importing the submodule binds the package attribute to the
    function, not to the submodule, as an eager `from .simulate import simulate` would."""

    def __setattr__(self, name: str, value: Any) -> None:
        target = _SHADOWED.get(self.__name__, {}).get(name)
        if target is not None and isinstance(value, types.ModuleType) and value.__name__ == target:
            value = getattr(value, name)
        super().__setattr__(name, value)
