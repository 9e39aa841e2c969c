"""The command line's help and shape: every help text prints what its source says, and every
module of `tokensde.cli` stays a thin shell (under 300 lines).

Rich reads `[word]` in a help text as a markup tag and drops it: `tokensde --help` printed
"(extra )" for "(extra [real])". The test renders the help of every command and sub-command and
looks for each bracketed word of the source text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from tokensde.cli import app

CLI_DIR = Path(__file__).resolve().parents[1] / "src" / "tokensde" / "cli"
MAX_LINES = 300
BRACKETED = re.compile(r"\\?\[[^\[\]\n]*\]")


def _tree(cmd, path=()):
    """`(path, command)` for the root and every command below it."""
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _tree(sub, (*path, name))


COMMANDS = list(_tree(get_command(app)))


def _texts(cmd) -> list[str]:
    """The help texts that `--help` of `cmd` prints: its own, its options' and its
    sub-commands' short help."""
    texts = [cmd.help or ""]
    texts += [getattr(p, "help", None) or "" for p in cmd.params]
    texts += [sub.help or "" for sub in getattr(cmd, "commands", {}).values()]
    return texts


def _flat(text: str) -> str:
    """`text` without Rich's box characters and line wrapping."""
    return re.sub(r"[\s│╭╮╰╯─]+", " ", text)


def test_the_tree_has_the_commands():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"simulate", "real", "real gpt2", "vit", "two-token prob", "meanfield"} <= names


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) or "root" for p, _ in COMMANDS])
def test_help_prints_every_bracketed_word(path, cmd):
    out = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    shown = _flat(out.output)
    for text in _texts(cmd):
        # short help may be cut at the first sentence: look only at what fits in one line
        for word in BRACKETED.findall(text.split("\n\n")[0]):
            word = word.lstrip("\\")
            assert word in shown, f"`tokensde {' '.join(path)} --help` lost {word!r}:\n{out.output}"


def test_root_help_names_the_real_extra():
    out = CliRunner().invoke(app, ["--help"], terminal_width=200)
    shown = _flat(out.output)
    assert "(extra )" not in shown
    assert "tokensde[real]" in shown


@pytest.mark.parametrize("module", sorted(CLI_DIR.glob("*.py")), ids=lambda p: p.name)
def test_cli_modules_stay_thin(module):
    lines = len(module.read_text().splitlines())
    assert lines < MAX_LINES, (f"{module.name} has {lines} lines: move the logic into the library "
                               f"and keep the CLI a thin shell (< {MAX_LINES})")
