"""`tokensde real module FILE:FUNC` (docs/own-transformer.md): a torch network from a file of the
user's, run as the family runs are (files, printed verdict, exit status 1 when it disagrees), its
inputs from the file or Gaussian tokens of --ctx, and every bad file, function or network refused
in one line that names FACTORY (or --ctx), exit status 2, before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.real.introspect import load_factory, run_own

DATA = Path(__file__).parent / "data"
BLOCK = str(DATA / "own_block.py")
EMBED = str(DATA / "own_embeddings.py")
SMALL = ["--inits", "3", "--inputs", "1"]


def _run(*args: str) -> object:
    return CliRunner().invoke(app, ["real", "module", *args])


@pytest.mark.slow  # a full run of the CLI: about 2.5 s of CPU
def test_own_network_run_written_and_judged_as_the_family_runs(tmp_path):
    out = tmp_path / "own"
    res = _run(BLOCK, *SMALL, "--seed", "5", "--out", str(out))
    assert res.exit_code in (0, 1), res.output
    assert (res.exit_code == 1) == ("DISAGREES" in res.output)  # the verdict sets the status
    assert "Sidak threshold" in res.output and "depth limit: not stated" in res.output
    assert {p.name for p in out.iterdir()} == {"real.parquet", "real.png", "mapping.json"}
    meta = json.loads((out / "mapping.json").read_text())
    p = meta["params"]
    assert (p["n"], p["d"], p["heads"], p["causal"], p["norm"], p["mlp_width"]) == (
        8, 32, 2, True, "pre", 128)  # tests/data/own_block.py: SwiGLU of 64 gates and 64 inputs
    assert p["mlp"].startswith("swiglu(q=") and meta["factory"] == BLOCK
    assert (meta["network"], meta["block"], meta["layers"], meta["inits"]) == (
        "Decoder", "Block", 3, 3)
    # the command is run_own with the arguments as typed
    make, inputs = load_factory(BLOCK)
    direct = run_own(make, inputs, inits=3, per_init=1, seed=5)
    table = pd.read_parquet(out / "real.parquet")
    pd.testing.assert_frame_equal(table.reset_index(drop=True),
                                  direct.table.reset_index(drop=True), check_exact=False,
                                  rtol=1e-12, atol=1e-12)


def test_gaussian_inputs_of_ctx_for_a_file_without_inputs(tmp_path):
    out = tmp_path / "emb"
    res = _run(f"{EMBED}:make", "--ctx", "5", *SMALL, "--json", "--out", str(out))
    assert res.exit_code in (0, 1), res.output
    summary = json.loads(res.output)
    assert summary["agreement"]["layers"] == 2
    meta = json.loads((out / "mapping.json").read_text())
    assert (meta["params"]["n"], meta["params"]["d"], meta["params"]["mlp"]) == (5, 16, "relu")
    # r0^2 of N(0, 1) entries: 3 inits x 1 input x 5 tokens x 16 coordinates, se sqrt(2 / 240)
    assert abs(meta["radius2"] - 1.0) <= 4 * (2 / 240) ** 0.5


@pytest.mark.parametrize(("target", "extra", "message"), [
    ("nope.py:make", [], "FACTORY nope.py:make: no file nope.py"),
    (f"{DATA}", [], "give a Python file and the function in it"),
    (f"{BLOCK}:build", [], "defines no function build(seed) (it defines Block, Decoder, inputs, make)"),
    (f"{EMBED}:not_a_module", ["--ctx", "4"], "make(seed) must return a torch.nn.Module; got int"),
    (BLOCK, ["--ctx", "4"], "--ctx: "),
    (EMBED, [], "--ctx: "),
    ("{tmp}/boom.py", [], "importing {tmp}/boom.py raised RuntimeError: boom"),
    ("{tmp}/linear.py", ["--ctx", "4"], "Linear: no residual blocks found"),
    ("{tmp}/wrong.py", ["--ctx", "4"], "reading the network raised RuntimeError"),
    (EMBED, ["--ctx", "4", "--blocks", "stack"], "blocks 'stack': Stack has no such attribute"),
], ids=["no-file", "not-py", "no-function", "not-a-module", "ctx-and-inputs", "neither",
        "import-fails", "no-blocks", "forward-fails", "bad-blocks-path"])
def test_bad_factories_refused_in_one_line_before_any_work(tmp_path, target, extra, message):
    (tmp_path / "boom.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "linear.py").write_text("from torch import nn\n\n\ndef make(seed):\n"
                                        "    return nn.Linear(4, 4)\n")
    (tmp_path / "wrong.py").write_text(  # its forward takes token ids, the inputs are embeddings
        f"import sys\nsys.path.insert(0, {str(DATA)!r})\nfrom own_block import make  # noqa\n")
    out = tmp_path / "out"
    res = _run(target.format(tmp=tmp_path), *extra, *SMALL, "--out", str(out))
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert message.format(tmp=tmp_path) in lines[0], lines[0]
    assert "FACTORY" in lines[0] or "--ctx" in lines[0] or "blocks" in lines[0]
    assert not out.exists()


def test_finished_results_kept_unless_force(tmp_path):
    out = tmp_path / "done"
    out.mkdir()
    (out / "real.parquet").write_bytes(b"finished")
    res = _run(BLOCK, *SMALL, "--out", str(out))
    assert res.exit_code == 2 and "--out" in res.output and "--force" in res.output, res.output
    assert (out / "real.parquet").read_bytes() == b"finished"


def test_sde_options_need_depth_scaled(tmp_path):
    res = _run(BLOCK, "--sde-steps", "8", "--out", str(tmp_path / "o"))
    assert res.exit_code == 2
    assert res.output.strip() == ("error: --sde-steps applies only with --depth-scaled (got "
                                  "without --depth-scaled)")


def test_help_says_the_file_runs_as_your_code():
    res = CliRunner().invoke(app, ["real", "module", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "FACTORY" in res.output
    assert "imported from its path: its code runs" in " ".join(res.output.split())
