"""The code blocks of the documentation (README.md, docs/**/*.md), for the tests that run them
(tests/test_readme.py, tests/test_docs_examples.py): find the blocks, run a Python block as a
fresh process on this tree's `src`, and parse a `tokensde ...` command as Click would.

A Python block preceded by `<!-- skip-test: REASON -->` is not run, one preceded by
`<!-- slow-test: REASON -->` runs with the slow tests (`-m slow`, which CI runs); the reason is
required.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MARK = re.compile(r"<!--\s*(skip|slow)-test:\s*(.*?)\s*-->\s*$")


def python_blocks(text: str) -> list[tuple[str, tuple[str, str] | None]]:
    """Each ```python block of `text` with its mark `(kind, reason)`, kind 'skip' or 'slow'
    (None: an ordinary block, run with the quick tests)."""
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        out.append((m.group(1), (mark.group(1), mark.group(2)) if mark else None))
    return out


def fenced(text: str, lang: str) -> list[str]:
    """The bodies of the ```LANG blocks of `text`."""
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def commands(block: str) -> list[str]:
    """The commands of a shell block: continued lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.split("#")[0].strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def prompts(block: str) -> list[tuple[str, str]]:
    """`(command, output)` for each `$ command` line of a console block and the lines after it."""
    runs = []
    for part in re.split(r"^\$ ", block, flags=re.M)[1:]:
        cmd, _, out = part.partition("\n")
        runs.append((cmd, out.rstrip("\n")))
    return runs


def run_python(code: str, cwd: Path | None = None, timeout: float = 300
               ) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter on this tree's `src`, one thread, no user site."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                               "PYTHONPATH": str(REPO / "src"), "MPLBACKEND": "Agg"})


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
