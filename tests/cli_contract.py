"""What each command refuses, generated from its validators: every value option of the commands
in BASES is given one value outside any range (`nan` for a number, `-1` for a whole number,
`nonsense` for a word) on a tiny valid base, and the one-line error is recorded. Then every option
that applies only in some modes (`tokensde.cli._applies.COMMANDS`) is typed outside its modes,
and the line of that refusal is recorded too (the cases are the ones tests/test_applicability.py
runs).

`python tests/cli_contract.py > docs/contract.md` writes the page; `tests/test_cli_fuzz.py`
checks that the page is current, so it cannot drift from the code.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typer.main import get_command
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.cli._applies import COMMANDS, MODES, Command, When, flags_of, modes_text

ROOT = get_command(app)

# --- the cases of the applicability table: every mode-specific option outside each mode ---------

GIVEN = object()  # a parameter typed with some value
ABSENT = object()  # a parameter not typed


def leaves(cmd: Any = ROOT, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """(command path, click command) of every command below `cmd`."""
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield " ".join(path), cmd
        return
    for name, sub in subs.items():
        yield from leaves(sub, (*path, name))


LEAVES = dict(leaves())


def all_options(cmd: Any) -> dict[str, Any]:
    """Parameter name -> option of a click command (not its arguments, nor --help)."""
    return {p.name: p for p in cmd.params
            if p.param_type_name == "option" and p.name != "help"}


def inside(w: When, decl: Command) -> Any:
    """A value of `w.param` (or GIVEN, ABSENT) under which condition `w` holds."""
    if w.given:
        return ABSENT if w.exclude else GIVEN
    return next(v for v in MODES[w.param] if (v in w.values) != w.exclude)


def outside(w: When) -> list[Any]:
    """Every value of `w.param` under which `w` fails (GIVEN, or None: `w.given` not typed)."""
    if w.given:
        return [GIVEN if w.exclude else None]
    return [v for v in MODES[w.param] if (v in w.values) == w.exclude]


def settle(decl: Command, settings: dict[str, Any], param: str, depth: int = 0) -> None:
    """Add to `settings` what makes a typed mode parameter `param` apply itself."""
    for w in decl.only.get(param, ()):
        key = w.given[0] if w.given else w.param
        if key not in settings and key not in decl.fixed and depth < 4:
            settings[key] = inside(w, decl)
            settle(decl, settings, key, depth + 1)


def cases() -> Iterator[tuple[str, str, When, dict[str, Any]]]:
    """(command, option, the condition that fails, the mode settings) for every option given
    outside each value of each of its modes; the conditions checked before it hold."""
    for path, decl in COMMANDS.items():
        for option, conditions in decl.only.items():
            for i, w in enumerate(conditions):
                if w.param in decl.fixed:
                    if decl.fixed[w.param] not in w.values:
                        yield path, option, w, {}
                    continue
                for value in outside(w):
                    settings: dict[str, Any] = {}
                    for before in conditions[:i]:
                        key = before.given[0] if before.given else before.param
                        settings[key] = inside(before, decl)
                    if value is not None:
                        settings[w.given[0] if w.given else w.param] = value
                    for key in list(settings):
                        settle(decl, settings, key)
                    if w.given and not w.exclude:
                        for g in w.given:
                            settings.pop(g, None)
                    yield path, option, w, settings


CASES = list(cases())


def sample(p: Any) -> list[str]:
    """A value of the right type for option `p` (its range is checked later than applicability)."""
    if getattr(p, "is_flag", False):
        return [p.opts[0]]
    kind = str(p.type_descriptor.annotation).lower()
    return [p.opts[0], "2" if "int" in kind else "0.5" if "float" in kind else "x"]


def typed(opts: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """The arguments that set each parameter of `settings` (GIVEN: typed with some value, ABSENT:
    left out) for a command whose options are `opts`."""
    args: list[str] = []
    for name, value in settings.items():
        p = opts[name]
        if value is ABSENT:
            continue
        if value is GIVEN:
            args += sample(p)
        elif isinstance(value, bool):
            args += [p.opts[0]] if value else []
        else:
            args += [p.opts[0], str(value)]
    return args


def in_its_modes(path: tuple[str, ...], name: str, base: list[str]) -> list[str]:
    """The arguments, beyond those of `base`, that put option `name` of `path` in its modes."""
    decl, settings = COMMANDS[" ".join(path)], {}
    settle(decl, settings, name)
    opts = all_options(LEAVES[" ".join(path)])
    return typed(opts, {k: v for k, v in settings.items()
                        if opts[k].opts[0] not in base or getattr(opts[k], "multiple", False)})


def command_line(path: str, option: str, settings: dict[str, Any]) -> list[str]:
    """The arguments of `path` that type `option` with the mode `settings`."""
    cmd = LEAVES[path]
    opts = all_options(cmd)
    args = [*path.split(), *(["x"] * sum(1 for p in cmd.params
                                         if p.param_type_name == "argument" and p.required))]
    args += typed(opts, {**settings, option: GIVEN})
    for name, p in opts.items():
        if p.required and name not in settings and name != option:
            args += sample(p)
    return args


# --- the table of values outside any range ------------------------------------------------------

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
    # absolute: the fuzz test runs in a folder of its own
    ("real", "module"): [str(Path(__file__).resolve().parent / "data" / "own_block.py"),
                         "--inits", "2",
                         "--inputs", "1"],
}
NEEDS_OUT = {("real", "torch-encoder"), ("real", "module")}  # a fresh --out folder per call
REPO = Path(__file__).resolve().parent.parent  # messages name the factory file relative to it
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
    """Run the command on its base, with `flag value` in place of the base's own, in the modes
    where that option applies."""
    args = [*path, *BASES[path]]
    if flag is not None and flag in args:
        i = args.index(flag)
        args = args[:i] + args[i + 2:]
    if flag is not None:
        name = next(p.name for p in command(path).params if flag in getattr(p, "opts", ()))
        args += in_its_modes(path, name, args)
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
            said = said.replace(str(where), "DIR").replace(str(REPO) + "/", "")
            said = said.replace("|", "\\|")
            out.append(f"| `tokensde {' '.join(path)}` | `{opt.opts[0]}` | `{value}` | {said} |")
    return out


APPLIES_HEAD = """
## Options that apply only in some modes

Each command declares, for each option, the modes it applies to: the value of another option,
the presence of another option, or the command itself. An option typed outside its modes is
refused before any work, with one line that names it and the mode (exit status 2); an option
left at its default is never refused. The other options of every command apply in every mode.

| command | option | applies only | typed outside, refused with |
|---|---|---|---|
"""


def applies_rows() -> list[str]:
    """One markdown row per command and mode-specific option: its modes and the line of the
    first case outside them."""
    first: dict[tuple[str, str], list[str]] = {}
    for path, option, _, settings in cases():
        first.setdefault((path, option), command_line(path, option, settings))
    out = []
    for (path, option), args in first.items():
        flags = flags_of(LEAVES[path])
        modes = modes_text(path, option, flags).removeprefix("only ").replace("|", "\\|")
        said = error_line(CliRunner().invoke(app, args).output).replace("|", "\\|")
        out.append(f"| `tokensde {path}` | `{flags[option]}` | {modes} | {said} |")
    return out


def page() -> str:
    """The whole page."""
    old = os.environ.get(LIMIT)
    os.environ[LIMIT] = "0.002"  # a value that makes a run long is refused, not run
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return (HEAD + "\n".join(rows(Path(tmp))) + "\n" + APPLIES_HEAD
                    + "\n".join(applies_rows()) + "\n")
    finally:
        if old is None:
            del os.environ[LIMIT]
        else:
            os.environ[LIMIT] = old


if __name__ == "__main__":
    sys.stdout.write(page())
