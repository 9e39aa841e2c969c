"""Every example of the documentation site (docs/**/*.md) works as written.

- each Python block, fenced (```python) or indented by four spaces, runs as a script file
  (`example.py`) in a fresh process on this tree's `src`, in a scratch directory, and must exit 0
  (as a user pastes it into a file: a process pool that spawns re-imports the script, so the
  `if __name__ == "__main__":` guard is tested); a block preceded by
  `<!-- slow-test: REASON -->` runs with the slow tests (it takes a minute or more), one preceded
  by `<!-- skip-test: REASON -->` not at all (few, each with its reason:
  `test_the_docs_have_examples_and_mark_few` holds that);
- each `tokensde ...` command of a ```bash block, of an indented shell block and each
  `$ tokensde ...` line of a ```console block parses as Click would (options, choices,
  sub-commands), without running; a usage line (`[--opt]`, `a | b`, `...`) is not parsed;
- each `python -c CODE` command runs its code as a script, like a Python block;
- each `make` target named exists, and each `python FILE` names a file of the repository;
  other programs (git, ray) are left alone;
- no indented block mixes Python and shell (it could be neither run nor parsed).

- a fenced Python block followed by "prints `LINE`" must print LINE as its last line of output
  (the page's claim about what the reader will see);
- each `$ tokensde ...` line of a fenced block (```console or a plain fence) followed by output
  lines is run, and its output must be what the page shows, line for line (so a page cannot show
  an output the code no longer prints). A line `...` stands for any lines, and `...` inside a line
  for any text; a block that uses them must say "abridged" in the sentence before it. The cheap
  commands (`cheap`: the exact theory, a help page) run with the quick tests, the others (Monte
  Carlo) with the slow ones. The run-time estimate a command prints first (`estimate: ...`) depends
  on the machine and is not compared.

The README has its own test (tests/test_readme.py), which also checks what its examples print.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from doc_blocks import (
    REPO,
    app,
    commands,
    fenced,
    indented_blocks,
    is_synopsis,
    make_targets,
    parse_cli,
    prompts,
    python_blocks,
    python_c,
    repo_paths,
    run_python,
    shell_blocks,
    strip_prefix,
    unsorted_code,
)

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
BLOCKS = [(page, i, code, mark) for page in PAGES
          for i, (code, mark) in enumerate(python_blocks(page.read_text()))]
MAX_MARKED = {"skip": 1, "slow": 3}
CLAIM = re.compile(r"```python\n(.*?)```\s*\n\s*prints `([^`]*)`", re.S)
CLAIMS = {code: line for page in PAGES for code, line in CLAIM.findall(page.read_text())}


def _id(page: Path, i: int) -> str:
    return f"{page.relative_to(DOCS)}#{i}"


def _shell_commands() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for block in shell_blocks(text):
            out += [(_id(page, 0), c) for c in commands(block)]
        for block in fenced(text, "console"):
            out += [(_id(page, 0), c) for c, _ in prompts(block)]
    return out


SHELL = _shell_commands()
PYTHON_C = [(w, code) for w, c in SHELL if (code := python_c(shlex.split(c))) is not None]


def test_the_docs_have_examples_and_mark_few():
    assert len(BLOCKS) >= 8 and len(SHELL) >= 15 and PYTHON_C
    for kind, most in MAX_MARKED.items():
        marked = [(_id(p, i), m[1]) for p, i, _, m in BLOCKS if m is not None and m[0] == kind]
        assert len(marked) <= most, marked
        assert all(len(why) > 10 for _, why in marked), marked


def _param(page: Path, i: int, code: str, mark: tuple[str, str] | None) -> object:
    marks = [] if mark is None else [pytest.mark.skip(reason=mark[1]) if mark[0] == "skip"
                                     else pytest.mark.slow]
    return pytest.param(page, i, code, marks=marks, id=_id(page, i))


@pytest.mark.parametrize(("page", "i", "code"), [_param(*b) for b in BLOCKS])
@pytest.mark.slow
def test_python_example_runs(page, i, code, tmp_path):
    out = run_python(code, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, f"{_id(page, i)}:\n{out.stderr[-3000:]}"
    claim = CLAIMS.get(code)
    if claim is not None:
        printed = out.stdout.strip().splitlines()
        assert printed and printed[-1].strip() == claim.strip(), (
            f"{_id(page, i)} prints {printed[-1:]!r}; the page says {claim!r}")


def test_the_pages_claim_outputs():
    assert len(CLAIMS) >= 3  # the claims the test above checks


@pytest.mark.parametrize(("where", "code"), PYTHON_C, ids=[w for w, _ in PYTHON_C])
def test_python_c_command_runs(where, code, tmp_path):
    out = run_python(code, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, f"{where}:\n{out.stderr[-3000:]}"


@pytest.mark.parametrize(("where", "command"), SHELL, ids=[f"{w}:{c[:40]}" for w, c in SHELL])
def test_shell_command_parses(where, command):
    args = strip_prefix(shlex.split(command))
    if not args or is_synopsis(args):
        return
    if args[0] == "make":
        assert set(args[1:]) <= make_targets(), f"{where}: {command}"
    elif args[0] in ("python", "python3"):
        if args[1] == "-c":
            return  # run by test_python_c_command_runs
        script = args[2] if args[1] == "-m" else args[1]
        assert args[1] == "-m" or (REPO / script).is_file(), f"{where}: {command}"
    elif args[0] == "tokensde":
        parse_cli(shlex.join(args))
    # other programs (git, ray, a subshell) are not ours to check


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def console_runs(text: str) -> list[tuple[str, str, str]]:
    """`(command, shown output, the text before its block)` for each `$ tokensde ...` line of a
    fenced block of `text` (```console or a plain fence) that is followed by output lines."""
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) not in ("", "console"):
            continue
        before = text[max(0, m.start() - 400):m.start()]
        out += [(cmd, shown, before) for cmd, shown in prompts(m.group(2))
                if cmd.startswith("tokensde ") and shown.strip()]
    return out


MACHINE_LINES = ("estimate:",)  # the run-time estimate, calibrated on the machine at hand


def cheap(args: list[str]) -> bool:
    """A command that prints in well under a second: the exact theory, or a help page."""
    return ("--help" in args or args[:2] in (["two-token", "prob"], ["two-token", "critical"])
            or (args[:2] == ["two-token", "hybrid"] and "--eps" not in args))


def output_matches(shown: str, printed: str) -> bool:
    """Whether `printed` is what `shown` says, line for line (trailing blanks ignored); a shown
    line `...` matches any lines, and `...` inside a line any text."""
    pattern = "".join("(?:.*\n)*?" if line.strip() == "..." else
                      re.escape(line.rstrip()).replace(re.escape("..."), ".*") + "\n"
                      for line in shown.strip("\n").splitlines())
    text = "".join(line.rstrip() + "\n" for line in printed.strip("\n").splitlines())
    return re.fullmatch(pattern, text) is not None


def _console_params() -> list[object]:
    out = []
    for page in PAGES:
        for k, (command, shown, before) in enumerate(console_runs(page.read_text())):
            args = shlex.split(command)[1:]
            marks = [] if cheap(args) else [pytest.mark.slow]
            out.append(pytest.param(page, command, shown, before, marks=marks,
                                    id=f"{page.relative_to(DOCS)}:{k}:{command[9:50]}"))
    return out


CONSOLE = _console_params()


def test_the_pages_show_console_outputs():
    cheap_runs = [p for p in CONSOLE if not p.marks]
    assert len(CONSOLE) >= 10 and len(cheap_runs) >= 5


@pytest.mark.parametrize(("page", "command", "shown", "before"), CONSOLE)
def test_console_output_is_what_the_command_prints(page, command, shown, before, tmp_path,
                                                    monkeypatch):
    from typer.testing import CliRunner

    if "..." in shown:
        sentence = before.rstrip().rsplit("\n\n", 1)[-1]
        assert "abridged" in sentence.lower(), (
            f"{page.name}: `{command}` shows an abridged output; say so before the block")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app(), [*repo_paths(shlex.split(command)[1:])])
    printed = "".join(line for line in res.output.splitlines(keepends=True)
                      if not line.startswith(MACHINE_LINES))
    assert output_matches(shown, printed), (
        f"{page.name}: `{command}` printed\n{res.output}\nthe page shows\n{shown}")


def test_output_matching():
    assert output_matches("a = 1\n  b", "a = 1  \n  b\n")
    assert not output_matches("a = 1", "a = 2")
    assert not output_matches("a = 1", "a = 1\nb = 2")
    assert output_matches("a = 1\n...\nz", "a = 1\nb\nc\nz")
    assert output_matches("wall_s ...", "wall_s 2.37")
    assert not output_matches("a\n...\nz", "a\nb")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_no_indented_block_mixes_python_and_shell(page):
    assert unsorted_code(page.read_text()) == [], f"{page.name}: split the block into ```python and ```bash"


# --- the block finder and the runner, on a page made up here --------------------------------

PAGE = """# A page

Text, then an indented Python block:

    import math
    print(math.pi)

A formula, not code:

    dx = P dW - (d-1)/2 x dt

- a list item

    its continuation, not a block

Commands:

    PYTHONPATH=src python3 -c "import sys
    print(sys.argv)"
    nice -n 10 env OMP_NUM_THREADS=1 tokensde simulate --runs 4   # a comment

A mixed block:

    from tokensde import simulate
    tokensde simulate --runs 4

```python
print("fenced")
```
"""


def test_the_finder_sorts_indented_blocks():
    assert [c for c, _ in indented_blocks(PAGE)][1] == "dx = P dW - (d-1)/2 x dt\n"
    assert len(indented_blocks(PAGE)) == 4  # the list continuation is not one
    assert [c for c, _ in python_blocks(PAGE)] == ['print("fenced")\n', "import math\nprint(math.pi)\n"]
    cmds = [c for b in shell_blocks(PAGE) for c in commands(b)]
    assert len(cmds) == 2
    assert python_c(shlex.split(cmds[0])) == "import sys\nprint(sys.argv)"
    assert strip_prefix(shlex.split(cmds[1])) == ["tokensde", "simulate", "--runs", "4"]
    assert unsorted_code(PAGE) == ["from tokensde import simulate\ntokensde simulate --runs 4\n"]


def test_a_block_runs_as_a_script(tmp_path):
    out = run_python("import sys\nprint(__name__, sys.argv[0])\n", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["__main__", str(tmp_path / "example.py")]


SPAWN = """import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

def square(x):
    return x * x

{body}
"""
POOL = ("with ProcessPoolExecutor(1, mp_context=mp.get_context('spawn')) as pool:\n"
        "    print(list(pool.map(square, [2])))")


def test_a_spawn_pool_needs_the_main_guard(tmp_path):
    """What the runner must catch: without the guard the spawned worker re-runs the pool."""
    bare = run_python(SPAWN.format(body=POOL), cwd=tmp_path, timeout=120)
    assert bare.returncode != 0
    guarded = SPAWN.format(body="if __name__ == '__main__':\n" + "\n".join(
        "    " + line for line in POOL.splitlines()))
    out = run_python(guarded, cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[4]", out.stderr
