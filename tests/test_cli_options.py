"""The command line reads the same everywhere: one `--time` (the horizon), one `--until`, one
decision tolerance with its reason, flags without a value type, defaults shown one way, and an
Examples section on every help page whose every example parses against its command.
"""

from __future__ import annotations

import re
import shlex

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.cli._help import EXAMPLES
from tokensde.cli._options import DECISION_TOL

ROOT = get_command(app)


def _tree(cmd, path=()):
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _tree(sub, (*path, name))


COMMANDS = {" ".join(p): c for p, c in _tree(ROOT)}
RUNS_LAYERS = ("simulate", "two-token mc", "meanfield table")  # the commands that decide runs


def _option(path: str, flag: str):
    return next(p for p in COMMANDS[path].params if flag in p.opts)


def _help(path: str) -> str:
    out = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": "240"})
    assert out.exit_code == 0, out.output
    return re.sub(r"[\s│╭╮╰╯─]+", " ", out.output)  # without Rich's boxes and line wrapping


def test_every_command_has_examples_and_nothing_else_does():
    assert set(EXAMPLES) == set(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: p or "root")
def test_help_shows_examples_and_no_flag_type(path):
    text = _help(path)
    assert "Examples:" in text
    for cmd, _ in EXAMPLES[path]:
        assert cmd in text, f"`tokensde {path} --help` lost the example {cmd!r}"
    # a flag takes no value: no `<bool>` beside `--json`, `--yes`, `--help`
    assert "<bool>" not in text


@pytest.mark.parametrize(("path", "line"), [(p, c) for p, ex in EXAMPLES.items() for c, _ in ex],
                         ids=lambda v: v if isinstance(v, str) and v.startswith("tokensde") else "")
def test_every_example_parses(path, line):
    """Each example names only options its command has, with values of their types (parsed by
    click as the command would be, without running it)."""
    words = shlex.split(line)
    assert words[0] == "tokensde"
    cmd, args = ROOT, words[1:]
    while hasattr(cmd, "commands"):  # down the groups to the command
        assert args and args[0] in cmd.commands, f"{line!r} names no command"
        cmd, args = cmd.commands[args[0]], args[1:]
    ctx = cmd.make_context(cmd.name, args)  # UsageError / BadParameter on a foreign option
    assert set(ctx.params) == {p.name for p in cmd.params}
    # the example belongs to its own entry's command (or, for a group, a command below it)
    assert line.startswith(" ".join(["tokensde", *path.split()]).strip())


def test_no_help_text_states_a_default_in_words():
    """Defaults are shown one way, as `[default: ...]` (computed ones as `show_default` text)."""
    said = re.compile(r"\(default|default:|; default|default \d", re.I)
    bad = [f"{path} {p.opts[0]}: {p.help}" for path, c in COMMANDS.items() for p in c.params
           if said.search(getattr(p, "help", None) or "")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", RUNS_LAYERS)
def test_time_is_the_horizon_and_until_decides(path):
    time, until = _option(path, "--time"), _option(path, "--until")
    assert time.help == _option("simulate", "--time").help
    assert time.help.startswith("Horizon T in depth time: no run goes past it")
    assert "decided" in until.help and "--max-time" not in _help(path)


def test_one_decision_tolerance_with_its_reason():
    from tokensde.sim.options import _DECIDE_TOL
    from tokensde.theory.first_passage import PAIR_TOL

    assert DECISION_TOL == _DECIDE_TOL == PAIR_TOL == 1e-8
    for path in ("simulate", "two-token mc", "two-token hybrid"):
        tol = _option(path, "--tol")
        assert tol.default == DECISION_TOL and "One tolerance for every command" in tol.help
    table = _option("meanfield table", "--tol")  # the one exception says why
    assert table.default == 1e-4 and "Looser than the 1e-8" in table.help


def test_a_bare_simulate_says_what_it_needs():
    out = CliRunner().invoke(app, ["simulate"])
    assert out.exit_code == 2
    assert "give the depth: --layers L" in out.output and "--time T" in out.output


def test_time_with_until_decided_is_a_maximum():
    """`simulate --time T --until decided` stops each run once decided, never past T."""
    out = CliRunner().invoke(app, ["simulate", "--n", "2", "--d", "3", "--beta", "1", "--time",
                                   "0.5", "--dt", "0.05", "--runs", "8", "--until", "decided",
                                   "--json"])
    assert out.exit_code == 0, out.output
    import json

    r = json.loads(out.output)
    assert r["T"] == 0.5 and r["layers"] == 10 and r["until"] == "decided"
    assert r["run_layers"] <= 8 * 10


def test_size_help_names_only_flags_the_command_has():
    assert "--full" not in _option("figure", "--size").help
    assert _option("figure", "--size").show_default == "full"
    assert _option("reproduce", "--size").show_default == "quick"
