"""The ViT depth sweep (issue 12): hybrid arm = spec layer with M = I, geometry at init, pairing,
the sweep kind on digits and on a generated CIFAR-10 set, and its errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as st
from test_vit_train import _write_cifar

from tokensde.model.params import ModelParams, ParameterError
from tokensde.sim.layers import _attention_output, network_step
from tokensde.sweep.config import SweepConfig
from tokensde.sweep.engine import run_sweep
from tokensde.sweep.kinds import _KINDS
from tokensde.sweep.store import load_table
from tokensde.vit import ViTConfig, build_vit, make_model, value_weights
from tokensde.vit.depth import (
    KIND,
    _depth_config,
    _depth_report,
    _geometry_at_init,
    _paired_gaps,
    _read_gaps,
    _run_depth,
    _token_geometry,
)
from tokensde.vit.train import train_epoch

TINY = {"block": "attention-only", "dataset": "digits", "dim": 16, "train_subset": 0,
        "test_subset": 0, "batch_size": 32, "probe_images": 8, "epochs": 1}


@pytest.mark.parametrize("lam", [0.0, 0.7])
def test_hybrid_arm_first_layer_is_network_step_with_mean_identity(lam: float) -> None:
    """hybrid:LAM puts V = r I + LAM V0 in the block: `N(x + r^2 y + r LAM V0 y)`, which is
    `layers.network_step` with M = I, xi = LAM V0 y and dt = r^2, on the unit sphere."""
    L, D, n, c = 9, 6, 5, 0.8
    cfg = ViTConfig(image_size=4, patch=2, dim=D, depth=L, heads=1, block="attention-only",
                    norm="rms", residual_scale=True)
    v0 = value_weights(build_vit(cfg, 3))[0].detach().double()
    block = make_model(cfg, f"hybrid:{lam}", 3).double().blocks[0]
    with torch.no_grad():
        block.attn.q.weight.copy_(c * torch.eye(D, dtype=torch.float64))
        block.attn.k.weight.copy_(c * torch.eye(D, dtype=torch.float64))
    u = torch.randn(4, n, D, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    with torch.no_grad():
        got = block(math.sqrt(D) * u) / math.sqrt(D)
    p = ModelParams(n=n, d=D, beta=c * c * math.sqrt(D), mean="identity", sigma=1.0)
    y = _attention_output(u, p)
    want = network_step(u, y, lam * (y @ v0.T), p, dt=cfg.branch_scale**2)
    # the weights are stored in float32: r I = I / 3 carries a relative rounding of ~3e-8
    torch.testing.assert_close(got, want, rtol=0, atol=1e-8)
    without_mean = network_step(u, y, lam * (y @ v0.T), ModelParams(n=n, d=D, beta=p.beta),
                                dt=cfg.branch_scale**2)
    assert (got - without_mean).abs().max() > 1e-3  # the mean part is really there


def test_token_geometry_closed_form() -> None:
    s = 1 / math.sqrt(2)
    # image 0: two equal tokens and their antipode; image 1: three orthonormal tokens
    x = torch.tensor([[[1.0, 0, 0], [2.0, 0, 0], [-1.0, 0, 0]],
                      [[0.0, 3, 0], [0.0, 0, 1], [s, 0, 0]]])
    g = _token_geometry(x, tol=1e-9)
    assert g["near_pos"] == pytest.approx(1 / 6) and g["near_neg"] == pytest.approx(2 / 6)
    assert g["mean_cos"] == pytest.approx((1 - 1 - 1) / 6)
    assert g["rank"] == pytest.approx((1.0 + 3.0) / 2)  # one pole: rank 1; orthonormal: 3


def test_geometry_is_measured_on_the_untrained_model(digits_data) -> None:
    cell = _KINDS[KIND].normalize({**TINY, "arm": "identity", "depth": 6, "train_seed": 4})
    row = _KINDS[KIND](cell, seed=0)
    data = digits_data
    model = make_model(ViTConfig(image_size=8, channels=1, patch=4, dim=16, depth=6, heads=1,
                                 norm="rms", residual_scale=True, block="attention-only"),
                       "identity", 4)
    fresh = _geometry_at_init(model, data.x_test[:8], 0.05)
    assert {f"init_{k}": v for k, v in fresh.items()} == {k: row[k] for k in row
                                                         if k.startswith("init_")}
    # the same model after one epoch has another geometry: the row did not measure it
    from tokensde.vit.train import TrainConfig, make_optimizer

    train = TrainConfig(epochs=1, batch_size=32, seed=4)
    train_epoch(model, make_optimizer(model, train), data, train, 0)
    assert _geometry_at_init(model, data.x_test[:8], 0.05)["mean_cos"] != fresh["mean_cos"]
    # V = I merges tokens: the deterministic flow at the branch scale, six blocks deep
    assert row["init_near_pos"] > _geometry_at_init(
        make_model(model.cfg, "noise:0", 4), data.x_test[:8], 0.05)["near_pos"]


@pytest.fixture(scope="module")
def digits_data():
    from tokensde.vit import load_dataset

    return load_dataset("digits")


def test_paired_gaps_match_hand_computed_t_interval() -> None:
    rng = np.random.default_rng(0)
    base = rng.uniform(0.6, 0.8, 5)
    diff = rng.normal(-0.02, 0.01, 5)
    rows = [{"block": "attention-only", "depth": 12, "arm": a, "train_seed": s, "acc": acc,
             "init_near_pos": 0.1, "status": "ok"}
            for a, accs in (("default", base), ("noise:0", base + diff)) for s, acc in
            enumerate(accs)]
    rows.append({**rows[-1], "train_seed": 9, "acc": 0.0, "arm": "noise:0"})  # no partner
    g = _paired_gaps(pd.DataFrame(rows)).set_index("arm")
    half = st.t.ppf(0.975, 4) * np.std(100 * diff, ddof=1) / math.sqrt(5)
    assert g.loc["noise:0", "pairs"] == 5 and g.loc["noise:0", "seeds"] == 6
    assert g.loc["noise:0", "gap"] == pytest.approx(100 * diff.mean())
    assert g.loc["noise:0", "half_width"] == pytest.approx(half)
    assert math.isnan(g.loc["default", "gap"]) and g.loc["default", "lam"] == 1.0


@pytest.mark.slow
def test_depth_sweep_runs_resumes_and_reports(tmp_path: Path) -> None:
    cfg = SweepConfig.from_dict({"kind": KIND, "module": "tokensde.vit.depth", "seed": 1,
                                 "params": TINY, "grid": {"arm": ["default", "noise:0",
                                                                  "hybrid:0"],
                                                          "depth": [2, 4], "train_seed": [0, 1]}})
    first = _run_depth(cfg, tmp_path, workers=1)
    assert first["ran"] == 12 and first["failed"] == 0
    again = _run_depth(cfg, tmp_path, workers=1)
    assert again["ran"] == 0 and again["skipped"] == 12
    table = load_table(tmp_path)
    default = table[table["arm"] == "default"]["acc"]
    assert table["acc"].between(0.0, 1.0).all() and (default > 0.2).all()  # chance: 0.1
    assert all(len(c) == 1 for c in table["acc_curve"])
    gaps = _read_gaps(tmp_path)
    assert len(gaps) == 6 and set(gaps["pairs"]) == {2}
    # identical weights apart from V: arms of one (depth, seed) differ, the seed sets them
    one = table[(table["depth"] == 2) & (table["train_seed"] == 0)].set_index("arm")["acc"]
    assert one.nunique() > 1
    md = (tmp_path / "gaps.md").read_text()
    assert "| hybrid:0 |" in md and "L = 4" in md
    for name in ("depth_gaps", "collapse", "curves"):
        assert (tmp_path / f"{name}.png").stat().st_size > 5000
    doc = json.loads((tmp_path / "gaps.json").read_text())
    assert doc["kind"] == "tokensde.vit.depth-gaps" and doc["sweep"]["kind"] == KIND
    assert "version" in doc
    # more seeds in another directory pool in: the same cells run there give the same numbers
    more = SweepConfig.from_dict({**cfg.to_dict(), "grid": {"arm": ["default", "noise:0"],
                                                           "depth": [2], "train_seed": [1, 2]}})
    run_sweep(more, tmp_path / "more", workers=1)
    again = load_table(tmp_path / "more").set_index("cell")["acc"]
    assert (again.reindex(table["cell"]).dropna() == table.set_index("cell")["acc"].reindex(
        again.index).dropna()).all()
    pooled = _depth_report(tmp_path, figures=False, also=[tmp_path / "more"])
    gaps = _read_gaps(tmp_path).set_index(["depth", "arm"])
    assert gaps.loc[(2, "noise:0"), "pairs"] == 3 and gaps.loc[(4, "noise:0"), "pairs"] == 2
    assert set(pooled) == {"gaps", "table"}
    with pytest.raises(ParameterError, match="not 'vit_depth'"):
        _depth_report(tmp_path, also=[_null_sweep(tmp_path / "null")])


def _null_sweep(out: Path) -> Path:
    run_sweep(SweepConfig.from_dict({"kind": "null", "seed": 1, "grid": {"x": [1.0]}}), out)
    return out

@pytest.mark.slow  # a ViT sweep: about 2 s of CPU
def test_the_same_sweep_runs_on_cifar10(tmp_path: Path) -> None:
    """`--dataset cifar10 --data-dir DIR` on a generated CIFAR-format pickle set."""
    _write_cifar(tmp_path / "cifar", per_batch=8)
    from typer.testing import CliRunner

    from tokensde.cli import app

    res = CliRunner().invoke(app, ["vit", "depth", "--size", "tiny", "--out", str(tmp_path / "o"),
                                   "--dataset", "cifar10", "--data-dir", str(tmp_path / "cifar"),
                                   "--workers", "1", "--quiet"])
    assert res.exit_code == 0, res.output
    table = load_table(tmp_path / "o")
    assert set(table["dataset"]) == {"cifar10"} and (table["status"] == "ok").all()
    assert set(table["tokens"]) == {1 + (32 // 4) ** 2}  # 8 x 8 patches of side 4, class token
    assert "| noise:0 |" in res.output


def test_depth_config_sizes_and_errors(tmp_path: Path) -> None:
    full = _depth_config("full")
    cells = full.cells()
    head = [c for c in cells if c.params["block"] == "attention-only" and c.params["depth"] >= 24
            and c.params["arm"] in ("noise:0", "hybrid:0", "shared")]
    seeds = {c.params["train_seed"] for c in head}
    assert len(seeds) >= 4 and {c.params["depth"] for c in cells} >= {3, 6, 12, 24, 48}
    assert {c.params["block"] for c in cells} == {"attention-only", "standard"}
    assert {c.params["arm"] for c in cells} >= {"noise:0", "noise:2", "hybrid:0", "hybrid:2",
                                                "identity", "shared", "default"}
    assert _depth_config("quick", epochs=2).params["epochs"] == 2
    with pytest.raises(ParameterError, match="depth vary in the grid"):
        _depth_config("quick", depth=3)
    (tmp_path / "x.toml").write_text('kind = "null"\nseed = 1\n[grid]\nx = [1]\n')
    with pytest.raises(ParameterError, match="size must be one of tiny, quick, full, long"):
        _depth_config(tmp_path / "x.toml")
    with pytest.raises(ParameterError, match=r"arm 'noise:-1': noise factor LAM must be .* >= 0"):
        _KINDS[KIND].normalize({**TINY, "arm": "noise:-1", "depth": 2, "train_seed": 0})
    with pytest.raises(ParameterError, match="tol must be in"):
        _KINDS[KIND].normalize({**TINY, "arm": "default", "depth": 2, "train_seed": 0, "tol": 2})


def test_cli_depth_errors_are_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tokensde.cli import app

    res = CliRunner().invoke(app, ["vit", "depth", "--size", "huge", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "huge" in res.output
    res = CliRunner().invoke(app, ["vit", "depth-report", str(tmp_path / "none")])
    assert res.exit_code == 2 and "Traceback" not in res.output
