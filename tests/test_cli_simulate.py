"""`tokensde simulate` and the results file it writes."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tokensde import Recording, TimeGrid, __version__
from tokensde.cli import app
from tokensde.io.store import StoreError, load_result, save_result

runner = CliRunner()


def test_version():
    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == f"tokensde {__version__}"


def test_simulate_json_and_results_file(tmp_path):
    path = tmp_path / "run.npz"
    args = ["simulate", "--n", "2", "--d", "4", "--beta", "2", "--init", "pair", "--rho0", "-0.5",
            "--time", "30", "--dt", "0.05", "--runs", "300", "--seed", "4", "--json",
            "--out", str(path)]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert summary["layers"] == 600 and summary["sampler"] == "fast" and summary["seed"] == 4
    # spec §5: P_anti(beta=2, d=4, rho0=-0.5) = 0.46624; the rest merge (T = 30 decides nearly all)
    anti = summary["frac_pairs_antipodal"]
    assert abs(anti - 0.46624) < 4 * (0.25 / 300) ** 0.5
    assert anti + summary["frac_pairs_merged"] > 0.97
    res = load_result(path)
    meta = res.metadata()
    assert meta["version"] == __version__ and meta["seed"] == 4 and meta["params"]["beta"] == 2.0
    assert res.gram.shape == (300, 11, 2, 2)
    # the saved file reproduces the printed numbers, counted at the default --tol 1e-8
    assert float((res.gram[:, -1, 0, 1] < -1 + 1e-8).mean()) == pytest.approx(anti)
    assert float((res.gram[:, -1, 0, 1] < -1 + 1e-3).mean()) > anti  # 1e-3 counts more


def test_simulate_value_init_sets_law_and_sigma(tmp_path):
    path = tmp_path / "run.npz"
    out = runner.invoke(app, ["simulate", "--d", "12", "--runs", "2", "--layers", "3",
                              "--value-init", "pytorch", "--json", "--out", str(path)])
    assert out.exit_code == 0, out.output
    params = load_result(path).metadata()["params"]
    assert params["law"] == "uniform" and params["sigma"] == pytest.approx(1 / 6)


def test_simulate_plot_writes_a_png(tmp_path):
    png = tmp_path / "fig.png"
    out = runner.invoke(app, ["simulate", "--n", "4", "--d", "3", "--runs", "20", "--layers", "50",
                              "--plot", str(png), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--d", "-2"], "d must be an integer from 2 to 2147483647"),
        (["--beta", "nan"], "beta must be a finite number >= 0"),
        (["--sampler", "magic"], "sampler must be one of"),
        (["--noise", "scalar", "--law", "uniform"], "law (for noise=scalar) must be one of"),
        (["--mean", "nofile.npy"], "mean must be 'none', 'identity' or a .npy file"),
        (["--dt", "0.1"], "--dt applies only with --time"),
        (["--heads", "0"], "heads must be an integer from 1 to 2147483647"),
        (["--norm", "mid"], "norm must be one of post, pre, peri; got 'mid'"),
        (["--norm", "peri", "--scheme", "sde", "--noise", "scalar"],
         "scheme='sde' with norm='peri' needs noise='matrix'"),
        (["--mlp", "relu", "--norm", "peri", "--scheme", "sde", "--sampler", "gram"],
         "scheme='sde' with norm='peri' needs noise='matrix' with sigma > 0 and mlp='none'"),
        (["--mlp", "gelu", "--mlp-sigma", "-1"], "mlp_sigma must be a finite number >= 0"),
        (["--qk", "gpt"], "qk must be one of identity, gaussian, wigner, goe; got 'gpt'"),
        (["--qk", "goe", "--qk-scale", "0"], "qk_scale must be a finite number > 0"),
        (["--qk-scale", "2"], "--qk-scale applies only with --qk other than identity "
                               "(got --qk identity)"),
        (["--qk", "goe", "--qk-redraw", "never"], "qk_redraw must be one of run, layer"),
        (["--qk", "goe", "--scheme", "sde", "--qk-samples", "3"],
         "--qk-samples applies only with --qk-redraw layer (got --qk-redraw run)"),
        (["--qk", "goe", "--sampler", "gram"], "sampler='gram' needs qk_redraw='layer'"),
        (["--qk", "wigner", "--qk-redraw", "layer", "--sampler", "gram"],
         "sampler='gram' needs a rotation-invariant qk law"),
        (["--value-init", "gpt3"], "value_init must be one of pytorch, gpt2, gaussian"),
        (["--value-init", "gpt2", "--sigma", "1"], "--value-init sets the law and sigma; give "
         "it without --sigma"),
        (["--value-init", "gpt2", "--law", "gaussian"], "without --law"),
    ],
)
def test_simulate_bad_input_names_the_parameter(args, msg):
    out = runner.invoke(app, ["simulate", "--runs", "2", "--layers", "3", *args]
                        if "--time" not in args else ["simulate", "--runs", "2", *args])
    assert out.exit_code == 2
    assert msg in out.output


def test_store_round_trip_and_bad_files(tmp_path):
    from tokensde import ModelParams, simulate

    res = simulate(ModelParams(n=3, d=4, mean="identity"), TimeGrid.make(layers=5), runs=3, seed=2,
                   recording=Recording(record=("gram", "tokens")))
    path = save_result(res, tmp_path / "r.npz")
    back = load_result(path)
    assert np.array_equal(back.gram, res.gram) and np.array_equal(back.tokens, res.tokens)
    assert back.params.to_dict() == res.params.to_dict() and back.seed == 2
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(path.read_bytes()[:100])
    with pytest.raises(StoreError, match="not a readable tokensde results file"):
        load_result(corrupt)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, meta=np.array(json.dumps({"kind": "other"})))
    with pytest.raises(StoreError, match=r"is not a tokensde\.simulation file"):
        load_result(foreign)
    newer = tmp_path / "newer.npz"
    np.savez(newer, meta=np.array(json.dumps({"kind": "tokensde.simulation", "schema": 99})))
    with pytest.raises(StoreError, match=r"schema 99"):
        load_result(newer)
    with pytest.raises(FileNotFoundError):
        load_result(tmp_path / "missing.npz")
