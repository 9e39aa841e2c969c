"""Every function exported by a public `__init__` (the package root's and each subpackage's
`__all__`) has a Google-style docstring: a one-line summary first, then `Args:` naming each
parameter and `Returns:` (or `Yields:`), so the API reference cannot drift from the signatures.

Functions whose sections are still to be written (in folders being reworked now) are listed in
PENDING: skipped while their sections are missing, checked like the rest once they have them.
Remove a name from PENDING when it is documented.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import tokensde

PENDING: set[str] = set()  # names whose sections are not written yet


def _exported() -> dict[str, object]:
    """`module.qualname` -> function, for each function in a public `__all__`."""
    packages = ["tokensde"] + [f"tokensde.{m.name}" for m in pkgutil.iter_modules(tokensde.__path__)
                               if m.ispkg]
    out: dict[str, object] = {}
    for name in packages:
        pkg = importlib.import_module(name)
        for attr in getattr(pkg, "__all__", []):
            obj = getattr(pkg, attr, None)
            if inspect.isfunction(obj):
                out.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return out


EXPORTED = _exported()


def _section(doc: str, title: str) -> str | None:
    """The body of section `title` (`Args:`, `Returns:`, ...) of a Google-style docstring."""
    m = re.search(rf"^{title}:\n((?:[ \t]+\S.*\n?|\n(?=[ \t]+\S))*)", doc, re.M)
    return None if m is None else m.group(1)


def test_the_exports_are_found():
    assert len(EXPORTED) >= 80
    assert "tokensde.sweep.engine.run_sweep" in EXPORTED
    assert "tokensde.meanfield.flow.run_coupled" in EXPORTED
    assert PENDING <= set(EXPORTED), sorted(PENDING - set(EXPORTED))


def _problems(fn: object) -> list[str]:
    doc = inspect.getdoc(fn) or ""
    out = []
    lines = doc.splitlines()
    if not lines or not lines[0].strip():
        out.append("no summary line first")
    params = [p for p in inspect.signature(fn).parameters.values()]
    args = _section(doc, "Args")
    if params:
        if args is None:
            out.append("no Args: section")
        else:
            named = set(re.findall(r"^\s+\**(\w+)(?: \([^)]*\))?:", args, re.M))
            missing = [p.name for p in params if p.name not in named]
            if missing:
                out.append(f"Args: misses {missing}")
            extra = named - {p.name for p in params}
            if extra:
                out.append(f"Args: names {sorted(extra)}, which are not parameters")
    if _section(doc, "Returns") is None and _section(doc, "Yields") is None:
        out.append("no Returns: (or Yields:) section")
    return out


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_exported_function_documents_args_and_returns(name):
    problems = _problems(EXPORTED[name])
    if name in PENDING and any(p.startswith("no ") for p in problems):
        pytest.skip("sections not written yet (PENDING)")
    assert problems == [], f"{name}: " + "; ".join(problems)


def test_the_check_finds_a_missing_section():
    def documented(a: int, b: int = 0) -> int:
        """Sum.

        Args:
            a: First.
            b: Second.

        Returns:
            The sum.
        """
        return a + b

    def undocumented(a: int, c: int) -> int:
        """Sum.

        Args:
            a: First.
        """
        return a + c

    assert _problems(documented) == []
    assert _problems(undocumented) == ["Args: misses ['c']", "no Returns: (or Yields:) section"]
