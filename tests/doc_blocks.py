"""The code blocks of the documentation (README.md, docs/**/*.md), for the tests that run them
(tests/test_readme.py, tests/test_docs_examples.py): find the blocks, run a Python block as a
script file in a fresh process on this tree's `src` (as a user pastes it into a `.py` file), and
parse a `tokensde ...` command as Click would.

Blocks are fenced (```python, ```bash, ```console) or indented by four spaces (Markdown's other
code block). An indented block is Python when it parses and starts with an import, shell when
each command starts with a program (`tokensde`, `python`, `make`, ..., after `VAR=value`, `nice`,
`env` or `timeout`), and otherwise prose (a formula); `unsorted_code` finds an indented block that
mixes the two, which the docs must split.

A Python block preceded by `<!-- skip-test: REASON -->` is not run, one preceded by
`<!-- slow-test: REASON -->` runs with the slow tests (`-m slow`, which CI runs); the reason is
required.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MARK = re.compile(r"<!--\s*(skip|slow)-test:\s*(.*?)\s*-->\s*$")


PROGRAMS = ("tokensde", "python", "python3", "pip", "make", "bash", "sudo", "git", "ray", "cd")
WRAPPERS = {"nice": ("-n",), "env": (), "timeout": ()}


def _mark(text: str, start: int) -> tuple[str, str] | None:
    """The `(kind, reason)` of a skip/slow mark on the last non-blank line before `start`."""
    before = text[:start].rstrip("\n").rsplit("\n", 1)[-1]
    mark = MARK.search(before)
    return (mark.group(1), mark.group(2)) if mark else None


def _fence_free(text: str) -> str:
    """`text` with every character of a fenced block replaced by `x` (its lines kept, so offsets
    stay, and none of them blank or indented)."""
    return re.sub(r"^```.*?^```", lambda m: re.sub(r"[^\n]", "x", m.group(0)), text,
                  flags=re.S | re.M)


def indented_blocks(text: str) -> list[tuple[str, int]]:
    """Each code block indented by four spaces (after a blank line, outside fences), dedented,
    with its offset in `text`. A list item's continuation lines are not blocks."""
    lines = _fence_free(text).splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out, i = [], 0
    while i < len(lines):
        starts = (lines[i].startswith("    ") and lines[i].strip() and i > 0
                  and not lines[i - 1].strip())
        if not starts:
            i += 1
            continue
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        j = i
        while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
            j += 1
        if not (re.match(r"\s*([-*+]|\d+\.)\s", prev) or prev.startswith("  ")):
            body = [text[offsets[k]:offsets[k + 1]][4:].rstrip("\n") for k in range(i, j)]
            out.append(("\n".join(body).strip("\n") + "\n", offsets[i]))
        i = j  # a list item's continuation (or a deeper indentation) is not a code block
    return out


def strip_prefix(args: list[str]) -> list[str]:
    """A command's arguments without leading `VAR=value`, `nice -n N`, `env`, `timeout N`."""
    while args:
        if "=" in args[0] and not args[0].startswith("-"):
            args = args[1:]
        elif args[0] in WRAPPERS:
            skip = 1 + (2 if args[1:2] == list(WRAPPERS[args[0]]) and WRAPPERS[args[0]] else 0)
            if args[0] == "timeout":
                skip = 2
            args = args[skip:]
        else:
            return args
    return args


def _is_shell(block: str) -> bool:
    cmds = commands(block)
    try:
        return bool(cmds) and all(strip_prefix(shlex.split(c))[:1] and
                                  strip_prefix(shlex.split(c))[0] in PROGRAMS for c in cmds)
    except ValueError:
        return False


def _is_python(block: str) -> bool:
    try:
        tree = ast.parse(block)
    except SyntaxError:
        return False
    return bool(tree.body) and isinstance(tree.body[0], ast.Import | ast.ImportFrom)


def _looks_like_code(block: str) -> bool:
    return any(re.match(r"(from tokensde|import \w|(\w+=\S+ )*(" + "|".join(PROGRAMS) + r") )",
                        line) for line in block.splitlines())


def python_blocks(text: str) -> list[tuple[str, tuple[str, str] | None]]:
    """Each ```python block of `text`, then each indented Python block, with its mark
    `(kind, reason)`, kind 'skip' or 'slow' (None: an ordinary block, run with the quick tests)."""
    out = [(m.group(1), _mark(text, m.start()))
           for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]
    out += [(code, _mark(text, at)) for code, at in indented_blocks(text) if _is_python(code)]
    return out


def shell_blocks(text: str) -> list[str]:
    """The ```bash blocks of `text` and its indented blocks of shell commands."""
    return fenced(text, "bash") + [code for code, _ in indented_blocks(text) if _is_shell(code)]


def unsorted_code(text: str) -> list[str]:
    """Indented blocks that hold code but are neither wholly Python nor wholly shell."""
    return [code for code, _ in indented_blocks(text)
            if _looks_like_code(code) and not _is_python(code) and not _is_shell(code)]


def is_synopsis(args: list[str]) -> bool:
    """A usage line (`tokensde x [--opt] ...`, `a | b`), shown to read, not to run."""
    return any(a.startswith("[") or a in ("|", "...") or a.endswith("...") for a in args)


def python_c(args: list[str]) -> str | None:
    """The code of a `python -c CODE` command (after its prefix), else None."""
    args = strip_prefix(args)
    if len(args) >= 3 and args[0] in ("python", "python3") and args[1] == "-c":
        return args[2]
    return None


def fenced(text: str, lang: str) -> list[str]:
    """The bodies of the ```LANG blocks of `text`."""
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def commands(block: str) -> list[str]:
    """The commands of a shell block: continued lines (a trailing backslash, or a quote left open)
    joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out, pending = [], ""
    for line in joined.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:
            continue  # a quoted string goes on to the next line
        if words:
            out.append(shlex.join(words))
        pending = ""
    return out


def prompts(block: str) -> list[tuple[str, str]]:
    """`(command, output)` for each `$ command` line of a console block and the lines after it."""
    runs = []
    for part in re.split(r"^\$ ", block, flags=re.M)[1:]:
        cmd, _, out = part.partition("\n")
        runs.append((cmd, out.rstrip("\n")))
    return runs


def run_python(code: str, cwd: Path | None = None, timeout: float = 300
               ) -> subprocess.CompletedProcess[str]:
    """Run `code` as the script file `example.py` in a fresh interpreter on this tree's `src`
    (one thread, no user site), in `cwd` (default: a scratch directory). As a script, the code is
    `__main__`, so a process pool that spawns re-imports it (the `if __name__ == "__main__":`
    guard matters)."""
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(cwd) if cwd is not None else Path(scratch)
        script = where / "example.py"
        script.write_text(code)
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=timeout, cwd=where,
                              env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                   "PYTHONPATH": str(REPO / "src"), "MPLBACKEND": "Agg",
                                   # the time model's cache: never the user's home
                                   "TOKENSDE_CACHE_DIR": os.environ.get("TOKENSDE_CACHE_DIR",
                                                                        scratch)})


def app() -> Any:
    """The `tokensde` Typer application (for `typer.testing.CliRunner`)."""
    from tokensde.cli import app as typer_app

    return typer_app


def repo_paths(args: list[str]) -> list[str]:
    """Arguments naming a file or folder of the repository (with a `/`) made absolute."""
    return [str(REPO / a) if "/" in a and (REPO / a).exists() else a for a in args]


def parse_cli(command: str) -> tuple[list[str], Any]:
    """Parse `tokensde ARGS` down to its sub-command without running it; returns the arguments
    (repository paths made absolute) and the sub-command. Click raises on a bad option."""
    args = shlex.split(command)
    assert args[0] == "tokensde", command
    args = repo_paths(args[1:])
    from typer.main import get_command

    cmd = get_command(app())  # Typer may bring its own copy of Click: groups are told by duck type
    ctx = cmd.make_context("tokensde", list(args))
    while hasattr(cmd, "resolve_command"):
        # a group keeps the sub-command's name apart from the arguments after it
        name, sub, rest = cmd.resolve_command(ctx, [*getattr(ctx, "_protected_args", []),
                                                    *ctx.args])
        assert sub is not None, command
        cmd, ctx = sub, sub.make_context(name or "", rest, parent=ctx)
    return args, cmd


def make_targets() -> set[str]:
    """The targets of the Makefile."""
    return set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
