"""Every command in README runs here, and prints what README says it prints.

- a ```python block followed by "prints `LINE`" (its last line) or by "prints" and a ```text
  block (its whole output) runs as a fresh process on this tree's `src`;
- each `$ tokensde ...` line of a ```console block runs, and its output must be the lines that
  follow it;
- each `tokensde ...` line of a ```bash block runs in a scratch directory, except the long ones
  (`LONG`: the study, the ViT sweep, training), whose arguments Click parses and checks without
  running them; each `make` target named exists in the Makefile.

The block finding, running and parsing are shared with tests/test_docs_examples.py (doc_blocks).
"""

from __future__ import annotations

import re
import shlex

import pytest
from doc_blocks import REPO, app, commands, fenced, make_targets, parse_cli, prompts, run_python
from typer.testing import CliRunner

README = (REPO / "README.md").read_text()
LAST_LINE = re.compile(r"```python\n(.*?)```\s*\n\s*prints `([^`]*)`", re.S)
WHOLE = re.compile(r"```python\n(.*?)```\s*\n\s*prints\s*\n\s*```text\n(.*?)```", re.S)
EXAMPLES = [(c, e, False) for c, e in LAST_LINE.findall(README)] + [
    (c, e, True) for c, e in WHOLE.findall(README)]
CONSOLE = [run for block in fenced(README, "console") for run in prompts(block)]
BASH = fenced(README, "bash")
LONG = ("reproduce", "vit")  # minutes to an hour each: parsed, not run


def test_readme_has_examples_with_their_output():
    assert EXAMPLES, "README lost its Python examples (a ```python block and what it prints)"
    assert any("to_pandas()" in code for code, _, _ in EXAMPLES)
    assert CONSOLE and BASH


@pytest.mark.parametrize(("code", "expected", "whole"), EXAMPLES)
@pytest.mark.slow
def test_readme_example_prints_what_readme_says(code, expected, whole):
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    got = [line.rstrip() for line in out.stdout.strip().splitlines()]
    if whole:
        assert got == [line.rstrip() for line in expected.strip().splitlines()]
    else:
        assert got[-1] == expected


@pytest.mark.parametrize(("command", "expected"), CONSOLE)
def test_readme_console_commands_print_what_readme_says(command, expected):
    args = shlex.split(command)
    assert args[0] == "tokensde"
    res = CliRunner().invoke(app(), args[1:])
    assert res.exit_code == 0, res.output
    assert res.output.rstrip("\n") == expected


@pytest.mark.slow
def test_readme_bash_commands_run_or_parse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    targets = make_targets()
    ran = 0
    for block in BASH:
        for command in commands(block):
            if command.startswith("make"):
                assert set(shlex.split(command)[1:]) <= targets, command
                continue
            args, _ = parse_cli(command)
            if args[0] in LONG:
                continue
            res = CliRunner().invoke(app(), args)
            assert res.exit_code == 0, f"{command}: {res.output}"
            ran += 1
    assert ran >= 3


def test_readme_names_the_paper_and_its_citation_files():
    first = "\n".join(README.splitlines()[:12])
    for needed in ("Clustering in Deep Stochastic Transformers", "arXiv:2601.21942", "Fedorov",
                   "Laurière", "ICML 2026"):
        assert needed in first, needed
    yaml = pytest.importorskip("yaml")  # PyYAML comes with the docs tools
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["license"] == "MIT" and cff["title"] and cff["authors"] and cff["message"]
    paper = cff["preferred-citation"]
    assert paper["title"] == "Clustering in Deep Stochastic Transformers"
    assert [a["family-names"] for a in paper["authors"]] == [
        "Fedorov", "Sander", "Elie", "Marion", "Laurière"]
    assert {"arXiv:2601.21942"} == {i["value"] for i in paper["identifiers"]}
    assert any("2606.05140" in str(r) for r in cff["references"])
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "tokensde developers" in licence
    assert 'license = { text = "MIT" }' in (REPO / "pyproject.toml").read_text()
