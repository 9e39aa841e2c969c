"""What each command refuses, generated from its validators: every value option of the commands
in BASES is given one value outside any range (`nan` for a number, `-1` for a whole number,
`nonsense` for a word) on a tiny valid base, and the one-line error is recorded.

`python tests/cli_contract.py > docs/contract.md` writes the page; `tests/test_cli_fuzz.py`
checks that the page is current, so it cannot drift from the code.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from typer.main import get_command
from typer.testing import CliRunner

from tokensde.cli import app

ROOT = get_command(app)
# (command path, tiny valid arguments): each runs in well under a second
BASES: dict[tuple[str, ...], list[str]] = {
    ("simulate",): ["--n", "3", "--d", "2", "--layers", "3", "--runs", "2"],
    ("two-token", "prob"): ["--beta", "1", "--d", "3"],
    ("two-token", "critical"): ["--d", "3"],
    ("two-token", "mc"): ["--beta", "1", "--d", "3", "--runs", "4", "--time", "0.1"],
    ("two-token", "hybrid"): ["--beta", "1", "--eps", "0.5", "--runs", "4", "--time", "0.1"],
    ("meanfield", "table"): ["--d", "2", "--beta", "1", "--n", "4", "--K", "4", "--start",
                             "iid", "--runs", "2", "--time", "0.1"],
    ("token-noise", "theory"): ["--beta", "1", "--d", "2", "--no-branch"],
    ("token-noise", "order"): ["--n", "8", "--runs", "2", "--time", "1", "--burn", "0.5",
                               "--dt", "0.1", "--samples", "5"],
    ("real", "torch-encoder"): ["--layers", "2", "--width", "8", "--heads", "2", "--ctx", "3",
                                "--inits", "2", "--inputs", "1", "--sde-steps", "4",
                                "--sde-runs", "2"],
}
NEEDS_OUT = {("real", "torch-encoder")}  # a fresh --out folder per call
LIMIT = "TOKENSDE_MAX_HOURS"
# options whose value is not checked by a range (paths, formats, help, flags)
SKIP = {"help", "out", "output", "plot", "force", "json_out", "yes", "config"}
HEAD = """# What each command refuses

Every option is checked before any work, and a value outside its range stops the command with one
line that names the option and what it accepts (exit status 2). The table lists, for each value
option of the main commands, the line given for one value outside any range. It is generated from
the code (`python tests/cli_contract.py > docs/contract.md`) and a test fails when it is stale.

Beyond these, every command that writes results refuses an existing file, or a folder that holds
other results, unless `--force` is given (a sweep folder of the same sweep is resumed instead);
and a run whose calibrated estimate exceeds `TOKENSDE_MAX_HOURS` (24 h by default) is refused
unless `--yes` is given.

| command | option | given | refused with |
|---|---|---|---|
"""


def command(path: tuple[str, ...]) -> Any:
    """The click command at `path` below the root."""
    cmd = ROOT
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def options(path: tuple[str, ...]) -> list[Any]:
    """The command's value options (not flags, arguments or SKIP)."""
    return [p for p in command(path).params if p.opts[0].startswith("--")
            and p.name not in SKIP and not getattr(p, "is_flag", False)]


def invoke(path: tuple[str, ...], flag: str | None, value: str | None, where: Path) -> Any:
    """Run the command on its base, with `flag value` in place of the base's own."""
    args = [*path, *BASES[path]]
    if flag is not None and flag in args:
        i = args.index(flag)
        args = args[:i] + args[i + 2:]
    if path in NEEDS_OUT:
        args += ["--out", tempfile.mkdtemp(dir=where) + "/out"]
    extra = [] if flag is None else [flag, str(value)]
    return CliRunner().invoke(app, [*args, *extra])


def error_line(output: str) -> str:
    """The one-line error of a refused command (click's usage errors unboxed)."""
    for line in output.splitlines():
        if line.startswith("error: "):
            return line.removeprefix("error: ")
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())
    found = re.search(r"(Invalid value for .*|No such option.*|Missing .*)", text)
    return found.group(1).strip() if found else text


def bad_value(opt: Any) -> str:
    """A value outside any range for the option's type."""
    kind = str(opt.type_descriptor.annotation).lower()
    if "int" in kind:
        return "-1"
    if "float" in kind:
        return "nan"
    return "nonsense"


def rows(where: Path) -> list[str]:
    """One markdown row per value option."""
    out = []
    for path in BASES:
        for opt in options(path):
            value = bad_value(opt)
            res = invoke(path, opt.opts[0], value, where)
            said = "accepted" if res.exit_code == 0 else error_line(res.output)
            said = said.replace(str(where), "DIR").replace("|", "\\|")
            out.append(f"| `tokensde {' '.join(path)}` | `{opt.opts[0]}` | `{value}` | {said} |")
    return out


def page() -> str:
    """The whole page."""
    old = os.environ.get(LIMIT)
    os.environ[LIMIT] = "0.002"  # a value that makes a run long is refused, not run
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return HEAD + "\n".join(rows(Path(tmp))) + "\n"
    finally:
        if old is None:
            del os.environ[LIMIT]
        else:
            os.environ[LIMIT] = old


if __name__ == "__main__":
    sys.stdout.write(page())
