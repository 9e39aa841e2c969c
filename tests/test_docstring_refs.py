"""Docstrings show calls and names that exist: every call written in backticks binds to the
signature of the tokensde function or class of that name, and every dotted name that starts
with a tokensde module resolves to something that module defines.

Static (ast over src/, nothing imported), so it costs well under a second.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tokensde"
SPAN = re.compile(r"`([^`\n]+)`")


@dataclass(frozen=True)
class Signature:
    """The names a callable accepts as keywords; `open` when it takes **kwargs."""

    keywords: frozenset[str]
    open: bool


def _modules() -> dict[str, ast.Module]:
    """Every module of the package by its dotted name below tokensde ('sim.loop')."""
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text())
    return out


MODULES = _modules()


def _function_signature(f: ast.FunctionDef | ast.AsyncFunctionDef, skip_self: bool) -> Signature:
    a = f.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if skip_self and names:
        names = names[1:]
    return Signature(frozenset(names), a.kwarg is not None)


def _class_signature(c: ast.ClassDef) -> Signature:
    """A class's keywords: its __init__'s, or its annotated fields (dataclasses)."""
    for node in c.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return _function_signature(node, skip_self=True)
    fields = {n.target.id for n in c.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return Signature(frozenset(fields), not fields)


def _signatures() -> dict[str, list[Signature]]:
    out: dict[str, list[Signature]] = {}
    for tree in MODULES.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                sig = _function_signature(node, skip_self=False)
                if sig.keywords & {"self", "cls"}:
                    sig = Signature(sig.keywords - {"self", "cls"}, sig.open)
                out.setdefault(node.name, []).append(sig)
            elif isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(_class_signature(node))
    return out


SIGNATURES = _signatures()


def _defined(tree: ast.Module) -> set[str]:
    """The top-level names a module defines or imports."""
    names: set[str] = set()
    body = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.If):
            body += node.body
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


DEFINED = {name: _defined(tree) for name, tree in MODULES.items()}
SHORT: dict[str, list[str]] = {}
for _name in MODULES:
    for _key in {_name, _name.split(".")[-1]} - {""}:
        SHORT.setdefault(_key, []).append(_name)
FILE_SUFFIXES = {"json", "md", "png", "npz", "npy", "toml", "csv", "parquet", "txt", "html",
                 "py", "pt"}


@dataclass(frozen=True)
class Doc:
    where: str
    text: str
    params: frozenset[str]


def _docs() -> Iterator[Doc]:
    for mod, tree in MODULES.items():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                                     ast.ClassDef)):
                continue
            text = ast.get_docstring(node)
            if not text:
                continue
            params: frozenset[str] = frozenset()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = _function_signature(node, skip_self=False).keywords
            params |= {getattr(node, "name", "")}
            yield Doc(f"tokensde.{mod}:{getattr(node, 'name', '<module>')}", text, params)


DOCS = list(_docs())


def _calls(span: str) -> Iterator[tuple[str, list[str]]]:
    try:
        tree = ast.parse(span.replace("...", "_"), mode="eval")
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            kws = [k.arg for k in node.keywords if k.arg]
            if name in SIGNATURES and kws:
                yield name, kws


def _binds(name: str, keywords: list[str]) -> bool:
    return any(s.open or set(keywords) <= s.keywords for s in SIGNATURES[name])


def bad_calls() -> list[str]:
    """Backticked calls whose keywords no tokensde callable of that name accepts."""
    return [f"{doc.where}: `{span}`" for doc in DOCS for span in SPAN.findall(doc.text)
            for name, kws in _calls(span) if not _binds(name, kws)]


def _resolves(dotted: str) -> bool:
    parts = dotted.removeprefix("tokensde.").split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        mods = SHORT.get(head)
        if mods is None:
            continue
        rest = parts[i:]
        return not rest or any(rest[0] in DEFINED[m] or f"{m}.{rest[0]}" in MODULES
                               for m in mods)
    return True


REF = re.compile(r"^(?:tokensde\.)?[a-z_][a-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)+$")


def bad_refs() -> list[str]:
    """Backticked `module.name` references (module a tokensde module, not a parameter of the
    documented object, not a file name) naming nothing that module defines."""
    out = []
    for doc in DOCS:
        for span in SPAN.findall(doc.text):
            ref = span.split("(")[0].strip()
            if (not REF.match(ref) or ref.split(".")[0] in doc.params
                    or ref.rsplit(".", 1)[1] in FILE_SUFFIXES):
                continue
            named = ref.split(".")[0] in SHORT or ref.startswith("tokensde.")
            if named and not _resolves(ref):
                out.append(f"{doc.where}: `{span}`")
    return out


def test_docstring_calls_bind_to_their_signatures() -> None:
    assert bad_calls() == []


def test_docstring_module_references_resolve() -> None:
    assert bad_refs() == []


@pytest.mark.parametrize("text, bad", [
    ("`simulate(p, grid, observe=[f])`", True),
    ("`simulate(p, grid, recording=Recording(observe=(f,)))`", False),
    ("`simulate(..., stopping=StoppingRule(until='decided', bogus=1))`", True),
])
def test_the_call_check_sees_a_wrong_keyword(text: str, bad: bool) -> None:
    found = [n for span in SPAN.findall(text) for n, kws in _calls(span) if not _binds(n, kws)]
    assert bool(found) is bad


@pytest.mark.parametrize("ref, ok", [
    ("sim.loop._march", True), ("loop._march", True), ("tokensde.sim.simulate", True),
    ("samplers._scheme_params", True), ("norm_sde._peri_factor", True),
    ("loop.run_forever", False), ("model.run_batch", False),
])
def test_the_reference_check_resolves_names(ref: str, ok: bool) -> None:
    assert _resolves(ref) is ok
