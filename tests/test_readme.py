"""Every command in README runs here, and prints what README says it prints.

- a ```python block followed by "prints `LINE`" (its last line) or by "prints" and a ```text
  block (its whole output) runs as a fresh process on this tree's `src`;
- each `$ tokensde ...` line of a ```console block runs, and its output must be the lines that
  follow it;
- each `tokensde ...` line of a ```bash block runs in a scratch directory, except the long ones
  (`LONG`: the study, the ViT sweep, training), whose arguments Click parses and checks without
  running them; each `make` target named exists in the Makefile.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from typer.main import get_command
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
LAST_LINE = re.compile(r"```python\n(.*?)```\s*\n\s*prints `([^`]*)`", re.S)
WHOLE = re.compile(r"```python\n(.*?)```\s*\n\s*prints\s*\n\s*```text\n(.*?)```", re.S)
EXAMPLES = [(c, e, False) for c, e in LAST_LINE.findall(README)] + [
    (c, e, True) for c, e in WHOLE.findall(README)]
CONSOLE = re.findall(r"```console\n(.*?)```", README, re.S)
BASH = re.findall(r"```bash\n(.*?)```", README, re.S)
LONG = ("reproduce", "vit")  # minutes to an hour each: parsed, not run


def _commands(block: str) -> list[str]:
    return [line.split("#")[0].strip() for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _console_runs() -> list[tuple[str, str]]:
    runs = []
    for block in CONSOLE:
        for part in re.split(r"^\$ ", block, flags=re.M)[1:]:
            cmd, _, out = part.partition("\n")
            runs.append((cmd, out.rstrip("\n")))
    return runs


def test_readme_has_examples_with_their_output():
    assert EXAMPLES, "README lost its Python examples (a ```python block and what it prints)"
    assert any("to_pandas()" in code for code, _, _ in EXAMPLES)
    assert _console_runs() and BASH


@pytest.mark.parametrize(("code", "expected", "whole"), EXAMPLES)
def test_readme_example_prints_what_readme_says(code, expected, whole):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                           "PYTHONPATH": str(REPO / "src")})
    assert out.returncode == 0, out.stderr
    got = [line.rstrip() for line in out.stdout.strip().splitlines()]
    if whole:
        assert got == [line.rstrip() for line in expected.strip().splitlines()]
    else:
        assert got[-1] == expected


def _app():
    from tokensde.cli import app

    return app


@pytest.mark.parametrize(("command", "expected"), _console_runs())
def test_readme_console_commands_print_what_readme_says(command, expected):
    args = shlex.split(command)
    assert args[0] == "tokensde"
    res = CliRunner().invoke(_app(), args[1:])
    assert res.exit_code == 0, res.output
    assert res.output.rstrip("\n") == expected


def _parse(args: list[str]) -> click.Command:
    """Parse `tokensde ARGS` as Click would, down to the sub-command, without running it."""
    cmd: click.Command = get_command(_app())
    ctx = cmd.make_context("tokensde", list(args))
    while isinstance(cmd, click.Group):
        name, sub, rest = cmd.resolve_command(ctx, ctx.args)
        assert sub is not None, args
        cmd, ctx = sub, sub.make_context(name or "", rest, parent=ctx)
    return cmd


def test_readme_bash_commands_run_or_parse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    ran = 0
    for block in BASH:
        for command in _commands(block):
            args = shlex.split(command)
            if args[0] == "make":
                assert set(args[1:]) <= targets, command
                continue
            assert args[0] == "tokensde", command
            args = [str(REPO / a) if (REPO / a).exists() and "/" in a else a for a in args[1:]]
            _parse(args)
            if args[0] in LONG:
                continue
            res = CliRunner().invoke(_app(), args)
            assert res.exit_code == 0, f"{command}: {res.output}"
            ran += 1
    assert ran >= 3
