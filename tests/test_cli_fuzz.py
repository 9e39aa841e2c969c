"""A fuzz test of the command line: each command gets a tiny valid base and one option set to a
value drawn by hypothesis (nan, inf, negative, zero, huge, empty, misspelled or foreign text).

Asserted for every example: the command exits 0, or with a one-line `error: ...` (or click's
usage error) that names the option; it never prints a traceback; and a results folder that
already exists is left byte for byte as it was. The run-time limit is set to a few seconds, so
a value that makes a run long is refused by the estimate instead of run.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_contract import BASES, NEEDS_OUT, options, page
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tokensde.cli import app

CASES = [(path, opt) for path in BASES for opt in options(path)]
BAD_TEXT = ["nan", "inf", "-inf", "-1", "0", "1e30", "100000000000000000000000", "1e-300", "",
            "abc", "0.5", "-0.0", "cuda:7", "float16"]


def _names(opt: Any) -> set[str]:
    """How an error may name the option: its flags without dashes, its parameter name."""
    flags = {o.lstrip("-").lower() for o in opt.opts}
    return flags | {str(opt.name).lower(), *(f.replace("-", "_") for f in flags)}


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


DOCS = Path(__file__).resolve().parents[1] / "docs"
ERROR = re.compile(r"^error: .+", re.M)


def check_outcome(result, opt: Any, output: str) -> None:
    """Exit 0, or a one-line error naming the option (or click's usage error), no traceback."""
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{output}")
    if result.exit_code == 0:
        return
    assert result.exit_code in (1, 2), output
    usage = "Invalid value" in output or "No such option" in output or "Missing" in output \
        or "requires an argument" in output or "unexpected extra argument" in output
    errors = ERROR.findall(output)
    assert usage or errors, f"no one-line error:\n{output}"
    if errors and opt is not None:
        low = errors[0].lower()
        assert any(re.search(rf"(?<![a-z_]){re.escape(n)}(?![a-z_])", low) for n in _names(opt)), (
            f"the error does not name {opt.opts}: {errors[0]}")


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("TOKENSDE_MAX_HOURS", "0.002")  # about 7 s: a long run is refused
    monkeypatch.chdir(tmp_path)
    return tmp_path


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CASES), value=st.sampled_from(BAD_TEXT))
@pytest.mark.slow
def test_every_bad_value_gets_a_one_line_error(env, case, value):
    path, opt = case
    args = [*path, *BASES[path]]
    flag = opt.opts[0]
    if flag in args:  # replace the base's value
        i = args.index(flag)
        args = args[:i] + args[i + 2:]
    if path in NEEDS_OUT:
        args += ["--out", str(env / uuid.uuid4().hex)]
    result = CliRunner().invoke(app, [*args, flag, value])
    check_outcome(result, opt, result.output)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(sorted(BASES)), word=st.sampled_from(["--nn", "--betta", "--seed-x",
                                                                   "--vocab", "--K0"]))
def test_misspelled_or_foreign_options_are_refused(env, path, word):
    out = ["--out", str(env / uuid.uuid4().hex)] if path in NEEDS_OUT else []
    result = CliRunner().invoke(app, [*path, *BASES[path], *out, word, "1"])
    assert result.exit_code == 2 and "No such option" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("path", [("simulate",), ("meanfield", "table")])
def test_a_finished_folder_is_left_as_it_was(env, path):
    """A run pointed at a folder that holds results, with bad and good values, never changes a
    byte of it without --force."""
    out = env / "done"
    out.mkdir()
    (out / "results.parquet").write_bytes(b"finished work")
    (out / "sweep.json").write_text('{"kind": "two_token"}')
    before = _snapshot(out)
    for extra in ([], ["--runs", "nan"], ["--runs", "3"]):
        result = CliRunner().invoke(app, [*path, *BASES[path], *extra, "--out", str(out)])
        check_outcome(result, None, result.output)
        assert result.exit_code != 0, result.output
        assert _snapshot(out) == before


@pytest.mark.parametrize(("arch", "option"), [("vit", ["--vocab", "5"]), ("vit", ["--ctx", "9"]),
                                              ("torch-encoder", ["--residual-scaling"]),
                                              ("gpt2", ["--no-bias"]), ("bert", ["--norm-last"]),
                                              ("bert", ["--value-law", "gaussian"])])
def test_options_that_the_architecture_does_not_read_are_refused(env, arch, option):
    result = CliRunner().invoke(app, ["real", arch, *option, "--out", str(env / "r")])
    assert result.exit_code == 2, result.output
    assert option[0] in result.output and f"does not apply to {arch}" in result.output
    assert not (env / "r").exists()


def test_every_base_runs():
    """The bases are valid, so a refusal in the tests above comes from the fuzzed option."""
    for path in BASES:
        out = []
        if path in NEEDS_OUT:
            out = ["--out", str(Path(tempfile.mkdtemp()) / "o")]
        result = CliRunner().invoke(app, [*path, *BASES[path], *out])
        assert result.exit_code in (0, 1), result.output  # 1: real's verdict at 2 inits


@pytest.mark.slow
def test_the_contract_page_is_current():
    """docs/contract.md is what `python tests/cli_contract.py` writes today."""
    assert (DOCS / "contract.md").read_text() == page(), (
        "docs/contract.md is stale: python tests/cli_contract.py > docs/contract.md")


# ----------------------------------------------------------------------------- whole command lines

EDGE = ["nan", "inf", "-inf", "-1", "-0.0", "0", "1e308", "1e30", "10000000000", "", "abc"]
SMALL_OK = ["1", "2", "3", "0.5", "0.1"]  # valid where they are in range, and tiny as sizes
QUICK = [("two-token", "prob"), ("two-token", "critical"), ("token-noise", "theory")]
FLAGS_KEPT_OUT = {"--yes", "--help"}  # --yes would let a long run through the estimate
OUT_KINDS = {("simulate",): "r.npz", ("two-token", "mc"): "r.json",
             ("two-token", "hybrid"): "r.json", ("token-noise", "order"): "r.json",
             ("meanfield", "table"): "mf"}  # the result each command's --out writes


def _flags(path: tuple[str, ...], kept_out: frozenset[str]) -> list[str]:
    """The command's on/off flags (their first spelling), but those of `kept_out`."""
    from cli_contract import command

    return [p.opts[0] for p in command(path).params if getattr(p, "is_flag", False)
            and p.opts[0] not in FLAGS_KEPT_OUT | kept_out]


def _all_names(path: tuple[str, ...]) -> set[str]:
    """Every way an error may name a parameter of the command (options and arguments)."""
    from cli_contract import command

    names: set[str] = set()
    for p in command(path).params:
        names |= _names(p) if p.opts[0].startswith("-") else {str(p.name).lower()}
    return names


FOREIGN = sorted({o.opts[0] for path in BASES for o in options(path)})


@st.composite
def command_lines(draw: Any, paths: list[tuple[str, ...]], kept_out: frozenset[str] = frozenset()
                  ) -> tuple[tuple[str, ...], list[str]]:
    """A command, its tiny base with up to three of its options given drawn values (edge or
    small), perhaps an option of another command, perhaps some of its flags, and perhaps
    --out at an existing result (with or without --force)."""
    path = draw(st.sampled_from(paths))
    args = list(BASES[path])
    own = options(path)
    for opt in draw(st.lists(st.sampled_from(own), max_size=3, unique_by=lambda o: o.opts[0])):
        flag = opt.opts[0]
        if flag in args:
            i = args.index(flag)
            args = args[:i] + args[i + 2:]
        args += [flag, draw(st.sampled_from(EDGE + SMALL_OK))]
    if draw(st.integers(0, 3)) == 0:
        args += [draw(st.sampled_from(FOREIGN)), draw(st.sampled_from(EDGE + SMALL_OK))]
    args += draw(st.lists(st.sampled_from(_flags(path, kept_out) or ["--help"]), max_size=2,
                          unique=True))
    if path in OUT_KINDS or path in NEEDS_OUT:
        target = draw(st.sampled_from(["existing", "fresh"]))
        args += ["--out", target if path not in NEEDS_OUT or target == "existing"
                 else f"fresh-{uuid.uuid4().hex}"]
    return path, args


def _prepare(where: Path, path: tuple[str, ...]) -> None:
    """An existing result at `where/existing` of the kind the command writes (finished work)."""
    kind = OUT_KINDS.get(path, "dir")
    target = where / "existing"
    if "." in kind:
        target.write_bytes(b"finished work " + kind.encode())
    else:
        target.mkdir()
        (target / "table.parquet").write_bytes(b"finished work")


def check_line(path: tuple[str, ...], args: list[str], result: Any, before: dict[str, str],
               after: dict[str, str]) -> str:
    """The outcome's class, after the checks: exit 0; or exit 2 with click's usage error or
    one `error:` line naming a parameter of the command; never a traceback; no file that was
    there changed or removed unless --force is on the line. (`real` exits 1 with its verdict.)
    """
    out = result.output
    assert "Traceback" not in out, out
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{out}")
    if "--force" not in args:
        assert {k: after.get(k) for k in before} == before, f"a file changed:\n{out}"
    if result.exit_code == 0:
        return "ran"
    if result.exit_code == 1 and path[0] == "real":
        return "verdict"
    assert result.exit_code == 2, out
    if "No such option" in out:
        return "foreign option"
    usage = re.search(r"Invalid value|Missing|requires an argument|does not take a value"
                      r"|unexpected extra argument", out)
    if usage:
        return "usage error"
    errors = ERROR.findall(out)
    assert len(errors) == 1, f"not one error line:\n{out}"
    low = errors[0].lower()
    assert any(re.search(rf"(?<![a-z_]){re.escape(n)}(?![a-z_])", low)
               for n in _all_names(path) | {"tokensde_max_hours"}), (
        f"the error names no parameter of {' '.join(path)}: {errors[0]}")
    return "refused"


def fuzz_one(where: Path, path: tuple[str, ...], args: list[str]) -> str:
    """Run one drawn line in a fresh folder under `where`; its outcome class."""
    run_dir = where / uuid.uuid4().hex
    run_dir.mkdir()
    _prepare(run_dir, path)
    before = _snapshot(run_dir)
    old = os.getcwd()
    os.chdir(run_dir)
    try:
        result = CliRunner().invoke(app, [*path, *args])
    finally:
        os.chdir(old)
    return check_line(path, args, result, before, _snapshot(run_dir))


@pytest.fixture
def capped(monkeypatch, tmp_path):
    """A time limit of about 1 s and 1 GiB of memory: a drawn size that would make a run long
    or large is refused by the estimate, not run."""
    monkeypatch.setenv("TOKENSDE_MAX_HOURS", "0.0003")
    monkeypatch.setenv("TOKENSDE_MEMORY", "1G")
    return tmp_path


@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=command_lines(QUICK, frozenset({"--branch"})))  # the branch takes 0.7 s
def test_whole_command_lines_quick(capped, line):
    """Fifteen drawn lines of the commands that only evaluate formulas (under 1 s of CPU)."""
    path, args = line
    fuzz_one(capped, path, args)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=command_lines(sorted(BASES)))
@pytest.mark.slow
def test_whole_command_lines(capped, line):
    """300 drawn lines over every command of BASES (the ones that simulate included)."""
    path, args = line
    fuzz_one(capped, path, args)
