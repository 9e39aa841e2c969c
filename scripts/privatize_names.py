#!/usr/bin/env python3
"""Give a leading underscore to every top-level name of the package that looks public but that no
`__all__` lists, everywhere the tree refers to it.

    python scripts/privatize_names.py [--root DIR] [--dry-run]

A name looks public (tests/test_public_names.py) when it is defined at the top level of a module
(`def`, `class`, an assignment to a plain name) whose path has no part with a leading underscore,
has none itself, and no `__all__` of the package lists it. Each such `foo` becomes `_foo`:

- in its module: every reference that resolves to the module global (scopes are followed, so a
  parameter or a function-local variable of the same name is left alone), `global` statements,
  decorators, annotations (string annotations too);
- in every file that imports it: `from tokensde.x import foo [as z]`, relative imports, re-exports
  without `__all__` (followed from module to module), `m.foo` where `m` is the module
  (`import tokensde.x as m`, `from tokensde import x`, `tokensde.x.foo`);
- in strings that name it: `getattr/setattr/hasattr/delattr(module, "foo")` (so
  `monkeypatch.setattr` and `mock.patch.object`; the module may be `m.__dict__`, `vars(m)` or
  `importlib.import_module("tokensde.x")`), `cast("Foo", ...)`, `TypeVar("Foo")`, any dotted
  path `tokensde.x.foo` or `tokensde.x:foo` in any text (`mock.patch("tokensde.x.foo")`, docs
  pages, `:::` lines of mkdocstrings, mkdocs.yml, pyproject.toml, Makefile), and a shorter
  dotted reference in prose (docstrings, comments, strings, pages: `loop.foo`, `sim.loop.foo`)
  when one module only ends that way and renames `foo`.

A name the scripts beside the package import (diagnostics/, benchmarks/: they use public names
only, tests/test_imports.py) keeps its name and joins its module's `__all__`. A name user pages
(README.md, docs/*.md but the API and developer pages, examples/) show is skipped and reported:
the lead decides whether it joins an `__all__` or the page changes; so is one whose new name
a file that would receive it already uses. Attributes of other objects, keyword arguments,
parameters, class attributes, dict keys and option names are never touched. A second run changes
nothing. After writing, `ruff check --select I --fix` re-sorts the imports of the changed files
when ruff is installed (the underscore changes the order), and the lines now too long for ruff
are listed, to wrap by hand. Strings that hold a bare name (`"foo"` in a test's list) are not
seen: the tests that fail after a run show them.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shutil
import subprocess
import sys
import tokenize
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "tokensde"
PY_DIRS = ("src", "tests", "benchmarks", "diagnostics", "examples", "scripts", "docs")
TEXT_SUFFIXES = (".md", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".sh", ".ini")
TOP_FILES = ("mkdocs.yml", "pyproject.toml", "Makefile")
# the scripts beside the package use its public names only (tests/test_imports.py): a name they
# import keeps its name and joins its module's `__all__`
SCRIPT_DIRS = ("diagnostics", "benchmarks")
NEVER_EDITED = ("README.md", "CHANGELOG.md")
# pages of the developer's guide: an internal name named there is renamed there, not kept
DEVELOPER_PAGES = ("ARCHITECTURE.md", "developer.md", "research-record.md", "benchmarks.md",
                   "changelog.md", "contract.md")
STRING_TYPE_CALLS = {"cast", "TypeVar", "NewType", "ParamSpec", "TypeVarTuple", "NamedTuple",
                     "TypedDict"}
STRING_ATTR_CALLS = {"getattr", "setattr", "hasattr", "delattr", "object", "setitem", "delitem"}
DOTTED = re.compile(rb"\b" + PACKAGE.encode() + rb"(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")
IMPORT_AS = re.compile(r"import\s+(" + PACKAGE + r"(?:\.\w+)+)\s+as\s+(\w+)")
FROM_IMPORT = re.compile(r"from\s+(" + PACKAGE + r"(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n]+)")


@dataclass
class Module:
    """A module of the package: its dotted name, its file, its tree and top-level facts."""

    name: str
    path: Path
    tree: ast.Module
    defined: set[str]
    listed: set[str]

    @property
    def is_package(self) -> bool:
        """True for an `__init__.py`."""
        return self.path.name == "__init__.py"

    @property
    def looks_public(self) -> bool:
        """True when no part of the module's dotted name starts with an underscore."""
        return not any(p.startswith("_") for p in self.name.split("."))


def top_level(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names defined at the top level by def, class or assignment to a name; the `__all__`)."""
    names: set[str] = set()
    listed: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id == "__all__" and node.value is not None:
                    listed = set(ast.literal_eval(node.value))
                elif isinstance(t, ast.Name):
                    names.add(t.id)
    return names, listed


def load_modules(root: Path) -> dict[str, Module]:
    """Every module of the package under `root/src`, by dotted name."""
    src = root / "src"
    out: dict[str, Module] = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_bytes(), str(path))
        defined, listed = top_level(tree)
        out[name] = Module(name, path, tree, defined, listed)
    return out


# ---------------------------------------------------------------- scopes of one file


@dataclass
class Scope:
    """A scope: what it binds, what it declares global, its parent (None for the module)."""

    kind: str
    parent: Scope | None
    bound: set[str] = field(default_factory=set)
    globals_: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    renamed: dict[str, str] = field(default_factory=dict)  # bound name -> new name
    modules: dict[str, str] = field(default_factory=dict)  # bound name -> module it stands for

    def owner(self, name: str) -> Scope:
        """The scope whose binding `name` refers to from here (the module for a builtin)."""
        if name in self.globals_:
            return self.root()
        if name in self.bound and name not in self.nonlocals:
            return self
        s = self.parent
        while s is not None:
            if s.kind != "class" and name in s.bound and (s.parent is None
                                                          or name not in s.globals_):
                return s
            s = s.parent
        return self.root()

    def root(self) -> Scope:
        """The module scope."""
        s = self
        while s.parent is not None:
            s = s.parent
        return s


@dataclass
class Ref:
    """A name used at a byte offset, in a scope; `attr_of` is set for `x.attr`."""

    scope: Scope
    name: str
    start: int
    attr_of: ast.expr | None = None


class FileScan(ast.NodeVisitor):
    """One pass over a file: its scopes, the names bound and used, imports, global statements."""

    def __init__(self, source: bytes, module: str | None, is_package: bool):
        self.source = source
        self.module = module
        self.is_package = is_package
        self.line_starts = [0]
        for i, ch in enumerate(source):
            if ch == 10:
                self.line_starts.append(i + 1)
        self.scope = Scope("module", None)
        self.refs: list[Ref] = []
        self.imports: list[tuple[Scope, str | None, str, str | None, int]] = []
        self.binds: list[tuple[Scope, str, int]] = []  # def/class/global names: (scope, name, at)
        self.string_attrs: list[tuple[Scope, ast.expr, str, int]] = []
        self.string_annotations: list[tuple[Scope, ast.Constant]] = []
        self.self_named: list[tuple[Scope, str, int]] = []  # TypeVar("S"), NewType("N", ...)
        self.identifiers: set[str] = set()

    def offset(self, line: int, col: int) -> int:
        """Byte offset of (1-based line, byte column)."""
        return self.line_starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        """Byte range of a node."""
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def bind(self, name: str) -> None:
        """`name` is bound in the current scope."""
        self.scope.bound.add(name)
        self.identifiers.add(name)

    def find_word(self, name: str, lo: int, hi: int, after: bytes = b"") -> int:
        """Byte offset of the word `name` in [lo, hi), after the pattern `after`."""
        m = re.compile(after + rb"\b(" + name.encode() + rb")\b").search(self.source, lo, hi)
        if m is None:
            raise ValueError(f"cannot place {name!r} at byte {lo}")
        return m.start(1)

    # scopes

    def in_scope(self, kind: str, body: list[ast.AST] | ast.AST) -> Scope:
        """Visit `body` in a new scope of `kind`; the scope is returned."""
        outer, self.scope = self.scope, Scope(kind, self.scope)
        for node in body if isinstance(body, list) else [body]:
            self.visit(node)
        made, self.scope = self.scope, outer
        return made

    def visit_arguments_outside(self, args: ast.arguments) -> None:
        """Defaults and annotations are evaluated in the enclosing scope."""
        for d in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            self.visit(d)
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                  *[x for x in (args.vararg, args.kwarg) if x is not None]]:
            if a.annotation is not None:
                self.visit_annotation(a.annotation)

    def visit_annotation(self, node: ast.expr) -> None:
        """An annotation; a string annotation is parsed and its names followed."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.string_annotations.append((self.scope, node))
        else:
            self.visit(node)

    def function_scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
                       body: list[ast.AST] | ast.AST) -> None:
        """Parameters bind in the function's scope, then its body is visited there."""
        outer, self.scope = self.scope, Scope("function", self.scope)
        args = node.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                  *[x for x in (args.vararg, args.kwarg) if x is not None]]:
            self.bind(a.arg)
        for stmt in body if isinstance(body, list) else [body]:
            self.visit(stmt)
        self.scope = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        self.visit_arguments_outside(node.args)
        if node.returns is not None:
            self.visit_annotation(node.returns)
        self.bind(node.name)
        start, end = self.span(node)
        self.binds.append((self.scope, node.name,
                           self.find_word(node.name, start, end, rb"(?:def|class)\s+")))
        self.function_scope(node, list(node.body))

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.visit_FunctionDef(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit_arguments_outside(node.args)
        self.function_scope(node, node.body)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(d)
        self.bind(node.name)
        start, end = self.span(node)
        self.binds.append((self.scope, node.name,
                           self.find_word(node.name, start, end, rb"class\s+")))
        self.in_scope("class", list(node.body))

    def visit_comprehension_node(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp
                                 | ast.DictComp) -> None:
        """The first iterable is evaluated outside, the rest in the comprehension's scope."""
        self.visit(node.generators[0].iter)
        outer, self.scope = self.scope, Scope("comprehension", self.scope)
        for i, gen in enumerate(node.generators):
            self.visit(gen.target)
            if i:
                self.visit(gen.iter)
            for cond in gen.ifs:
                self.visit(cond)
        for part in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
            self.visit(part)
        self.scope = outer

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self.visit_comprehension_node(node)

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self.visit_comprehension_node(node)

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        self.visit_comprehension_node(node)

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self.visit_comprehension_node(node)

    # bindings and uses

    def visit_Name(self, node: ast.Name) -> None:
        self.identifiers.add(node.id)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.bind(node.id)
        self.refs.append(Ref(self.scope, node.id, self.offset(node.lineno, node.col_offset)))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.visit(node.value)
        start, end = self.span(node)
        start = end - len(node.attr.encode())
        self.refs.append(Ref(self.scope, node.attr, start, node.value))

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        module = imported_module(node.value)
        if module and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            self.scope.modules[node.targets[0].id] = module  # m = importlib.import_module(...)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        self.visit_annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        start, end = self.span(node)
        pos = start
        for name in node.names:
            (self.scope.globals_ if isinstance(node, ast.Global) else self.scope.nonlocals).add(name)
            pos = self.find_word(name, pos, end)
            self.refs.append(Ref(self.scope, name, pos))
            pos += len(name)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.visit_Global(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.bind(node.name)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            bound = a.asname or a.name.split(".")[0]
            self.bind(bound)
            self.scope.modules[bound] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self.absolute(node)
        for a in node.names:
            if a.name == "*":
                continue
            bound = a.asname or a.name
            self.bind(bound)
            at = self.offset(a.lineno, a.col_offset)
            self.imports.append((self.scope, base, a.name, a.asname, at))
            if a.asname == a.name:  # `import x as x`, the explicit re-export: both words go
                end = self.offset(a.end_lineno or a.lineno, a.end_col_offset or 0)
                self.refs.append(Ref(self.scope, a.name,
                                     self.find_word(a.name, at + len(a.name), end, rb"as\s+")))

    def absolute(self, node: ast.ImportFrom) -> str | None:
        """The dotted module an import reads from (None for a relative import outside the
        package)."""
        if node.level == 0:
            return node.module
        if self.module is None:
            return None
        parts = self.module.split(".")
        if not self.is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        return ".".join([*parts, *([node.module] if node.module else [])])

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func = node.func
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else None)
        first = node.args[0] if node.args else None
        if (isinstance(first, ast.Constant) and isinstance(first.value, str)
                and name in STRING_TYPE_CALLS):
            if name == "cast":
                self.string_annotations.append((self.scope, first))
            else:
                self.self_named.append((self.scope, first.value,
                                        self.offset(first.lineno, first.col_offset) + 1))
        if (name in STRING_ATTR_CALLS and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            self.string_attrs.append((self.scope, node.args[0], node.args[1].value,
                                      self.offset(node.args[1].lineno, node.args[1].col_offset)))


# ---------------------------------------------------------------- the plan


@dataclass
class Plan:
    """What a run renames: module -> {name: new name}, and the names skipped with why."""

    renames: dict[str, dict[str, str]]
    skipped: dict[str, str]  # "module:name" -> reason
    shown: dict[str, list[str]]  # "module:name" -> user pages that show it
    listed: dict[str, list[str]]  # module -> names the scripts import, added to its __all__


def candidates(modules: dict[str, Module]) -> list[tuple[str, str]]:
    """(module, name) of every name that looks public and no `__all__` lists."""
    listed = set().union(*(m.listed for m in modules.values()))
    return sorted((m.name, n) for m in modules.values() if m.looks_public
                  for n in m.defined if not n.startswith("_") and n not in listed)


def follow_reexports(modules: dict[str, Module], scans: dict[str, FileScan],
                     renames: dict[str, dict[str, str]]) -> None:
    """A module that imports a renamed name at its top level (no `as`) re-exports it renamed."""
    changed = True
    while changed:
        changed = False
        for name, scan in scans.items():
            if name not in modules:
                continue
            for scope, base, imported, asname, _ in scan.imports:
                new = renames.get(base or "", {}).get(imported)
                if (scope.parent is None and new and asname in (None, imported)
                        and renames[name].get(imported) != new):
                    renames[name][imported] = new
                    changed = True


def module_of(scan: FileScan, scope: Scope, node: ast.expr,
              modules: dict[str, Module]) -> str | None:
    """The package module an expression stands for (`m`, `tokensde.x.y`), else None."""
    if isinstance(node, ast.Name):
        owner = scope.owner(node.id)
        found = owner.modules.get(node.id)
        return found if found in modules else None
    if isinstance(node, ast.Attribute):
        base = module_of(scan, scope, node.value, modules)
        if base is not None and f"{base}.{node.attr}" in modules:
            return f"{base}.{node.attr}"
        if node.attr == "__dict__":  # setitem(m.__dict__, "foo", ...)
            return base
    if isinstance(node, ast.Call):
        imported = imported_module(node)
        if imported in modules:  # importlib.import_module("tokensde.x")
            return imported
        if (isinstance(node.func, ast.Name) and node.func.id == "vars" and len(node.args) == 1):
            return module_of(scan, scope, node.args[0], modules)
    return None


def imported_module(node: ast.expr) -> str | None:
    """The module of `importlib.import_module("tokensde.x")`, else None."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else None)
    arg = node.args[0]
    if name == "import_module" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def bind_imports(scan: FileScan, modules: dict[str, Module],
                 renames: dict[str, dict[str, str]]) -> None:
    """Mark the bindings of one file that an import makes: a module, or a renamed name."""
    for scope in {id(s): s for s, *_ in scan.imports}.values():
        scope.renamed.clear()
    for scope, base, name, asname, _ in scan.imports:
        if base is None:
            continue
        bound = asname or name
        if f"{base}.{name}" in modules:
            scope.modules[bound] = f"{base}.{name}"
        elif asname in (None, name) and name in renames.get(base, {}):
            scope.renamed[name] = renames[base][name]


def file_edits(scan: FileScan, modules: dict[str, Module], renames: dict[str, dict[str, str]],
               own: dict[str, str]) -> Iterator[tuple[int, str, str]]:
    """(byte offset, old, new) of each rename in one Python file; `own` are the module
    scope's renamed names when the file is a package module."""
    root = scan.scope
    root.renamed.clear()
    bind_imports(scan, modules, renames)
    root.renamed.update(own)
    for ref in scan.refs:
        if ref.attr_of is None:
            new = ref.scope.owner(ref.name).renamed.get(ref.name)
        else:
            base = module_of(scan, ref.scope, ref.attr_of, modules)
            new = renames.get(base or "", {}).get(ref.name)
        if new:
            yield ref.start, ref.name, new
    for scope, name, at in scan.binds:
        new = scope.owner(name).renamed.get(name) if scope.kind != "class" else None
        if new:
            yield at, name, new
    for _scope, base, name, asname, at in scan.imports:
        new = renames.get(base or "", {}).get(name)
        if new and asname == new:  # `import foo as _foo` becomes `import _foo`
            end = scan.source.index(asname.encode(), at + len(name)) + len(asname)
            yield at, scan.source[at:end].decode(), new
        elif new:
            yield at, name, new
    for scope, target, name, at in scan.string_attrs:
        base = module_of(scan, scope, target, modules)
        new = renames.get(base or "", {}).get(name)
        if new:
            quote = re.compile(rb"['\"]").search(scan.source, at)
            if quote is not None and scan.source[quote.end():quote.end() + len(name)] == name.encode():
                yield quote.end(), name, new
    for scope, const in scan.string_annotations:
        yield from string_annotation_edits(scan, scope, const, modules, renames)
    for scope, value, at in scan.self_named:
        # `_S = TypeVar("S")`: the string follows the variable the call is assigned to
        new = scope.owner(value).renamed.get(value)
        if new and scan.source[at:at + len(value)] == value.encode():
            yield at, value, new


def string_annotation_edits(scan: FileScan, scope: Scope, const: ast.Constant,
                            modules: dict[str, Module], renames: dict[str, dict[str, str]]
                            ) -> Iterator[tuple[int, str, str]]:
    """Renames inside a one-line string annotation such as `"Foo | None"`."""
    start, end = scan.span(const)
    text = scan.source[start:end]
    if b"\n" in text or text[:1] not in (b"'", b'"') or text[:3] in (b"'''", b'"""'):
        return
    try:
        expr = ast.parse(str(const.value), mode="eval")
    except SyntaxError:
        return
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            new = scope.owner(node.id).renamed.get(node.id)
            if new:
                yield start + 1 + node.col_offset, node.id, new


def dotted_edits(text: bytes, modules: dict[str, Module], renames: dict[str, dict[str, str]]
                 ) -> Iterator[tuple[int, str, str]]:
    """Renames in dotted paths `tokensde.x.y.name` and `tokensde.x.y:name` of any text."""
    for m in DOTTED.finditer(text):
        words = re.split(rb"([.:])", m.group())
        parts = [w.decode() for w in words[::2]]
        seps = words[1::2]
        k = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules
                 and b":" not in seps[:i - 1]), default=0)
        if 0 < k < len(parts):
            new = renames.get(".".join(parts[:k]), {}).get(parts[k])
            if new:
                yield m.start() + sum(len(w) for w in words[:2 * k]), parts[k], new


PARTIAL = re.compile(rb"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def partial_edits(text: bytes, regions: list[tuple[int, int]], modules: dict[str, Module],
                  renames: dict[str, dict[str, str]]) -> Iterator[tuple[int, str, str]]:
    """Renames in dotted references of prose (`loop._march`, `sim.loop._march`: a module named by
    the end of its dotted name, when one module only fits) within the byte ranges `regions`."""
    for lo, hi in regions:
        for m in PARTIAL.finditer(text, lo, hi):
            parts = m.group().decode().split(".")
            for k in range(len(parts) - 1, 0, -1):
                suffix = ".".join(parts[:k])
                fits = [mod for mod in modules if (mod == suffix or mod.endswith("." + suffix))
                        and parts[k] in renames[mod]]
                if len(fits) == 1:
                    yield (m.start() + len(".".join(parts[:k]).encode()) + 1, parts[k],
                           renames[fits[0]][parts[k]])
                    break
                if fits:
                    break


def prose_regions(path: Path, text: bytes) -> list[tuple[int, int]]:
    """Byte ranges of prose: a Python file's strings and comments, all of another file."""
    if path.suffix != ".py":
        return [(0, len(text))]
    raw = text.split(b"\n")
    starts = [0]
    for line in raw:
        starts.append(starts[-1] + len(line) + 1)
    lines = [line.decode() for line in raw]

    def at(row: int, col: int) -> int:
        return starts[row - 1] + len(lines[row - 1][:col].encode()) if row <= len(lines) else len(text)

    out = []
    try:
        for tok in tokenize.tokenize(io.BytesIO(text).readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT):
                out.append((at(*tok.start), at(*tok.end)))
    except (tokenize.TokenError, SyntaxError):
        return []
    return out


# ---------------------------------------------------------------- the tree


def tree_files(root: Path) -> list[Path]:
    """Every file the tool reads: Python and text files of the tree's folders, and the top files."""
    out = [root / f for f in TOP_FILES if (root / f).exists()]
    for d in PY_DIRS:
        for p in sorted((root / d).rglob("*")) if (root / d).is_dir() else []:
            if (p.is_file() and (p.suffix == ".py" or p.suffix in TEXT_SUFFIXES)
                    and "__pycache__" not in p.parts and not p.name.startswith(".")):
                out.append(p)
    out += [root / f for f in ("README.md",) if (root / f).exists()]
    return sorted(set(out))


def is_user_page(root: Path, path: Path) -> bool:
    """README.md, the pages of docs/ but the API and developer ones, and examples/."""
    rel = path.relative_to(root)
    if rel.parts[0] == "examples":
        return True
    if rel == Path("README.md"):
        return True
    return (rel.parts[0] == "docs" and len(rel.parts) == 2 and rel.suffix == ".md"
            and rel.name not in DEVELOPER_PAGES)


def shown_on(text: str, modules: dict[str, Module], cands: set[tuple[str, str]]
             ) -> set[tuple[str, str]]:
    """The candidates a user page shows: by dotted path, imported in a code block (or read from
    a module a code block imports: `token_noise.name`), or written `module.name` in backquotes."""
    out: set[tuple[str, str]] = set()
    for mod, name in cands:
        if re.search(rf"\b{re.escape(mod)}[.:]{name}\b", text):
            out.add((mod, name))
    aliases: dict[str, str] = {}  # a module a code block imports, by the name it is bound to
    for m in FROM_IMPORT.finditer(text):
        mod = m.group(1)
        parts = [p for p in re.split(r"[,()\s]+", m.group(2)) if p]
        for i, part in enumerate(parts):
            if (mod, part) in cands:
                out.add((mod, part))
            if f"{mod}.{part}" in modules:
                bound = parts[i + 2] if parts[i + 1:i + 2] == ["as"] and i + 2 < len(parts) else part
                aliases[bound] = f"{mod}.{part}"
    for m in IMPORT_AS.finditer(text):
        if m.group(1) in modules:
            aliases[m.group(2)] = m.group(1)
    for alias, mod in aliases.items():
        for m in re.finditer(rf"(?<![\w.]){alias}\.(\w+)", text):
            if (mod, m.group(1)) in cands:
                out.add((mod, m.group(1)))
    for m in re.finditer(r"`(\w+)\.(\w+)\b", text):
        for mod, name in cands:
            if name == m.group(2) and mod.rsplit(".", 1)[-1] == m.group(1):
                out.add((mod, name))
    return out


def make_plan(root: Path, modules: dict[str, Module], scans: dict[str, FileScan]) -> Plan:
    """Candidates, less those user pages show and those that would clash; re-exports followed."""
    cands = candidates(modules)
    skipped: dict[str, str] = {}
    shown: dict[str, list[str]] = defaultdict(list)
    cset = set(cands)
    for path in tree_files(root):
        if is_user_page(root, path):
            for mod, name in sorted(shown_on(path.read_text(errors="replace"), modules, cset)):
                shown[f"{mod}:{name}"].append(str(path.relative_to(root)))
    for key in shown:
        skipped[key] = "shown on user pages: " + ", ".join(shown[key])
    listed: dict[str, list[str]] = defaultdict(list)
    for key, scan in sorted(scans.items()):
        if Path(key).parent.name in SCRIPT_DIRS and Path(key).parent.parent == Path("."):
            for _, base, name, _, _ in scan.imports:
                if (base, name) in cset and name not in listed[str(base)]:
                    listed[str(base)].append(name)
                    skipped.pop(f"{base}:{name}", None)
                    shown.pop(f"{base}:{name}", None)
    kept = {f"{m}:{n}" for m, names in listed.items() for n in names}
    while True:
        renames: dict[str, dict[str, str]] = {m: {} for m in modules}
        for mod, name in cands:
            if f"{mod}:{name}" not in skipped and f"{mod}:{name}" not in kept:
                renames[mod][name] = "_" + name
        follow_reexports(modules, scans, renames)
        clashes = find_clashes(modules, scans, renames)
        if not clashes:
            return Plan(renames, skipped, dict(shown), {m: sorted(n) for m, n in listed.items()
                                                        if n})
        skipped.update(clashes)


def find_clashes(modules: dict[str, Module], scans: dict[str, FileScan],
                 renames: dict[str, dict[str, str]]) -> dict[str, str]:
    """Names whose new name a file that would receive the rename already uses."""
    origin = {(m, n): (m, n) for m in modules for n in modules[m].defined}
    out: dict[str, str] = {}
    for key, scan in scans.items():
        own = renames.get(key, {}) if key in modules else {}
        for at, old, new in file_edits(scan, modules, renames, own):
            if new in scan.identifiers and new not in already_aliased(scan, renames):
                src = next((f"{m}:{old}" for m in sorted(modules)
                            if (m, old) in origin and renames[m].get(old) == new), None)
                if src is not None:
                    out[src] = f"clash: {key} already uses {new} (byte {at})"
    return out


def already_aliased(scan: FileScan, renames: dict[str, dict[str, str]]) -> set[str]:
    """New names a file already binds as an alias of the renamed name (`import foo as _foo`)."""
    return {asname for _, base, name, asname, _ in scan.imports
            if asname and renames.get(base or "", {}).get(name) == asname}


def scan_all(root: Path, modules: dict[str, Module]) -> dict[str, FileScan]:
    """A FileScan per Python file of the tree, keyed by dotted module name or relative path."""
    by_path = {m.path: m for m in modules.values()}
    out: dict[str, FileScan] = {}
    for path in tree_files(root):
        if path.suffix != ".py":
            continue
        mod = by_path.get(path)
        source = path.read_bytes()
        try:
            tree = mod.tree if mod else ast.parse(source, str(path))
        except SyntaxError:
            continue
        scan = FileScan(source, mod.name if mod else None, bool(mod and mod.is_package))
        scan.visit(tree)
        out[mod.name if mod else str(path.relative_to(root))] = scan
    return out


def apply(text: bytes, edits: set[tuple[int, str, str]], where: str) -> bytes:
    """The text with each edit made (checked: the old word is at its offset)."""
    for at, old, new in sorted(edits, reverse=True):
        if text[at:at + len(old.encode())] != old.encode():
            raise SystemExit(f"{where}: expected {old!r} at byte {at}, found "
                             f"{text[at:at + len(old.encode())]!r}")
        text = text[:at] + new.encode() + text[at + len(old.encode()):]
    return text


def run(root: Path, dry_run: bool) -> int:
    """Plan, rewrite the tree (unless dry_run), print the report."""
    modules = load_modules(root)
    scans = scan_all(root, modules)
    before = len(candidates(modules))
    plan = make_plan(root, modules, scans)
    changed: dict[Path, bytes] = {}
    per_module: dict[str, int] = defaultdict(int)
    for path in tree_files(root):
        rel = str(path.relative_to(root))
        if rel in NEVER_EDITED or (is_user_page(root, path) and path.suffix != ".py"):
            continue
        text = path.read_bytes()
        edits = set(dotted_edits(text, modules, plan.renames))
        edits |= set(partial_edits(text, prose_regions(path, text), modules, plan.renames))
        if path.suffix == ".py":
            key = next((m.name for m in modules.values() if m.path == path), rel)
            if key in scans:
                own = plan.renames.get(key, {}) if key in modules else {}
                edits |= set(file_edits(scans[key], modules, plan.renames, own))
        if edits:
            changed[path] = text = apply(text, edits, rel)
        key = next((m.name for m in modules.values() if m.path == path), rel)
        if plan.listed.get(key):
            # a new `__all__` also lists the module's public names other `__all__`s list, so
            # that what the module offered stays offered (a re-exported name is public here too)
            already = {n for n in modules[key].defined if not n.startswith("_")} - set(
                n for m, n in candidates(modules) if m == key)
            changed[path] = add_to_all(text, plan.listed[key], already)
    for (mod, name) in candidates(modules):
        if name in plan.renames[mod]:
            per_module[mod] += 1
    report(before, plan, per_module, changed, root)
    if not dry_run and changed:
        for path, text in changed.items():
            path.write_bytes(text)
        sort_imports([p for p in changed if p.suffix == ".py"])
        changed = {p: p.read_bytes() for p in changed}
    report_long_lines(root, changed)
    return 0


def report_long_lines(root: Path, changed: dict[Path, bytes]) -> None:
    """The lines of changed Python files now longer than ruff's line-length: fix them by hand."""
    limit = 88
    config = root / "pyproject.toml"
    if config.exists():
        limit = tomllib.loads(config.read_text()).get("tool", {}).get("ruff", {}).get(
            "line-length", limit)
    long = [f"  {path.relative_to(root)}:{i}" for path, text in sorted(changed.items())
            if path.suffix == ".py"
            for i, line in enumerate(text.decode().splitlines(), 1) if len(line) > limit]
    if long:
        print(f"\nlines now longer than {limit} characters (wrap them by hand):")
        print("\n".join(long))


def sort_all(names: set[str]) -> list[str]:
    """`__all__` in ruff's order (RUF022): CONSTANTS, then Classes, then the rest."""
    def key(n: str) -> tuple[int, str]:
        kind = 0 if n.isupper() or (n.upper() == n and "_" in n) else (
            1 if n[:1].isupper() else 2)
        return kind, n
    return sorted(names, key=key)


def add_to_all(text: bytes, names: list[str], public: set[str]) -> bytes:
    """A module's text with `names` in its `__all__`; one made after the imports when it has
    none lists the module's `public` names too."""
    tree = ast.parse(text)
    found = next((n for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)), None)
    lines = text.decode().splitlines(keepends=True)
    if found is not None:
        old = set(ast.literal_eval(found.value))
        head = "".join(lines[:found.lineno - 1])
        tail = "".join(lines[found.end_lineno or found.lineno:])
        return (head + format_all(old | set(names)) + tail).encode()
    after = 0
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            after = node.end_lineno or after
        else:
            break
    head, tail = "".join(lines[:after]), "".join(lines[after:])
    return (head + "\n" + format_all(set(names) | public) + tail).encode()


def format_all(names: set[str], width: int = 100) -> str:
    """`__all__ = [...]` as source, wrapped under `width` columns."""
    rows, row = [], "__all__ = ["
    for i, n in enumerate(sort_all(names)):
        item = f'"{n}"' + ("]" if i == len(names) - 1 else ",")
        if len(row) + len(item) + 1 > width:
            rows.append(row.rstrip())
            row = " " * 11
        row += item + " "
    return "\n".join([*rows, row.rstrip()]) + "\n"


def sort_imports(paths: list[Path]) -> None:
    """Re-sort the imports of the changed files with ruff, when it is installed."""
    ruff = shutil.which("ruff")
    if ruff and paths:
        subprocess.run([ruff, "check", "--select", "I", "--fix", "--quiet", *map(str, paths)],
                       check=False)


def report(before: int, plan: Plan, per_module: dict[str, int], changed: dict[Path, bytes],
           root: Path) -> None:
    """Counts per module, the skipped names with their reason, the names users are shown."""
    total = sum(per_module.values())
    print(f"names that look public and no __all__ lists: {before}; renamed: {total}; "
          f"skipped: {len(plan.skipped)}; files changed: {len(changed)}")
    print("\nrenamed per module:")
    for mod in sorted(per_module):
        print(f"  {mod}: {per_module[mod]}")
    print("\nskipped:")
    for key in sorted(plan.skipped):
        print(f"  {key}: {plan.skipped[key]}")
    print("\nkept for the scripts beside the package (diagnostics/, benchmarks/), added to the "
          "module's __all__:")
    for mod in sorted(plan.listed):
        print(f"  {mod}: {', '.join(plan.listed[mod])}")
    print("\nnames users are shown but no __all__ lists:")
    for key in sorted(plan.shown):
        print(f"  {key}  ({', '.join(plan.shown[key])})")
    print("\nfiles changed:")
    for path in sorted(changed):
        print(f"  {path.relative_to(root)}")


def main(argv: list[str] | None = None) -> int:
    """Command line: --root DIR (default: this script's repository), --dry-run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--dry-run", action="store_true", help="report only, write nothing")
    args = ap.parse_args(argv)
    return run(args.root.resolve(), args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
