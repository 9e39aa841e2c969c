"""Every example of the documentation site (docs/**/*.md) works as written.

- each ```python block runs as a fresh process on this tree's `src`, in a scratch directory, and
  must exit 0; a block preceded by `<!-- slow-test: REASON -->` runs with the slow tests (it
  takes a minute or more), one preceded by `<!-- skip-test: REASON -->` not at all (few, each
  with its reason: `test_the_docs_have_examples_and_mark_few` holds that);
- each `tokensde ...` command of a ```bash block and each `$ tokensde ...` line of a ```console
  block parses as Click would (options, choices, sub-commands), without running;
- each `make` target named exists, and each `python FILE` names a file of the repository;
  other programs (git, ray) are left alone.

The README has its own test (tests/test_readme.py), which also checks what its examples print.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from doc_blocks import REPO, commands, fenced, make_targets, parse_cli, prompts, python_blocks, run_python

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
BLOCKS = [(page, i, code, mark) for page in PAGES
          for i, (code, mark) in enumerate(python_blocks(page.read_text()))]
MAX_MARKED = {"skip": 1, "slow": 3}


def _id(page: Path, i: int) -> str:
    return f"{page.relative_to(DOCS)}#{i}"


def _shell_commands() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for block in fenced(text, "bash"):
            out += [(_id(page, 0), c) for c in commands(block)]
        for block in fenced(text, "console"):
            out += [(_id(page, 0), c) for c, _ in prompts(block)]
    return out


SHELL = _shell_commands()


def test_the_docs_have_examples_and_mark_few():
    assert len(BLOCKS) >= 8 and len(SHELL) >= 15
    for kind, most in MAX_MARKED.items():
        marked = [(_id(p, i), m[1]) for p, i, _, m in BLOCKS if m is not None and m[0] == kind]
        assert len(marked) <= most, marked
        assert all(len(why) > 10 for _, why in marked), marked


def _param(page: Path, i: int, code: str, mark: tuple[str, str] | None) -> object:
    marks = [] if mark is None else [pytest.mark.skip(reason=mark[1]) if mark[0] == "skip"
                                     else pytest.mark.slow]
    return pytest.param(page, i, code, marks=marks, id=_id(page, i))


@pytest.mark.parametrize(("page", "i", "code"), [_param(*b) for b in BLOCKS])
def test_python_example_runs(page, i, code, tmp_path):
    out = run_python(code, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, f"{_id(page, i)}:\n{out.stderr[-3000:]}"


@pytest.mark.parametrize(("where", "command"), SHELL, ids=[f"{w}:{c[:40]}" for w, c in SHELL])
def test_shell_command_parses(where, command):
    args = shlex.split(command)
    while args and "=" in args[0] and not args[0].startswith("-"):
        args = args[1:]  # environment assignments
    if not args:
        return
    if args[0] == "make":
        assert set(args[1:]) <= make_targets(), f"{where}: {command}"
    elif args[0] in ("python", "python3"):
        script = args[2] if args[1] == "-m" else args[1]
        assert args[1] == "-m" or (REPO / script).is_file(), f"{where}: {command}"
    elif args[0] == "tokensde":
        parse_cli(shlex.join(args))
    # other programs (git, ray, a subshell) are not ours to check
