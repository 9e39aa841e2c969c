"""The committed part of the fair ViT protocol (benchmarks/results/vit-fair, and vit-fair-wide that
widens its grid at 1 and 3 epochs): the numbers that docs/vit-fair.md and README quote are
recomputed from their cells, and the sweeps resume there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tokensde.sweep.config import _fingerprint
from tokensde.sweep.engine import sweep_status
from tokensde.sweep.store import load_table
from tokensde.vit.fair import _fair_config
from tokensde.vit.fair_choice import _choose_lr, _per_seed
from tokensde.vit.fair_report import _load_fair
from tokensde.vit.fair_stats import _fair_gaps

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "vit-fair"
WIDE = RESULTS.parent / "vit-fair-wide"


@pytest.fixture(scope="module")
def both() -> tuple[pd.DataFrame, pd.DataFrame]:
    seeds, plan, _ = _load_fair([RESULTS, WIDE])
    return seeds, _choose_lr(seeds, plan)


@pytest.fixture(scope="module")
def seeds(both: tuple[pd.DataFrame, pd.DataFrame]) -> pd.DataFrame:
    return both[0]


def test_committed_cells_are_the_whole_fair_sizes() -> None:
    st, wide = sweep_status(RESULTS), sweep_status(WIDE)
    assert st["kind"] == "vit_fair" and st["total"] == st["done"] == 80 and st["failed"] == 0
    assert wide["done"] == wide["total"] == 16 and wide["failed"] == 0
    assert _choose_lr(_per_seed(load_table(RESULTS))).query("epochs <= 10")["complete"].all()
    # the committed sweeps are today's `fair` and `fair-wide` sizes, so both resume
    for d, size in ((RESULTS, "fair"), (WIDE, "fair-wide")):
        cfg = _fair_config(size)
        assert sweep_status(d)["fingerprint"] == _fingerprint(cfg, cfg.cells())


def test_widened_grid_brackets_every_short_budget_choice(both) -> None:
    """docs/vit-fair.md: with 1.6e-2 and 3.2e-2 added at 1 and 3 epochs, no choice of 1, 3 or 10
    epochs is on an edge of its grid; every arm is worse at 1.6e-2 than at its choice."""
    _, chosen = both
    short = chosen[chosen["epochs"] <= 10]
    assert short["complete"].all() and not short["edge"].any()
    for _, r in short[short["epochs"] <= 3].iterrows():
        val = dict(zip(r["grid"], r["val_by_lr"], strict=True))
        assert r["lr"] <= 8e-3 and val[1.6e-2] < r["val"] - 2.0
    pick = chosen.set_index(["arm", "epochs"])["lr"]
    assert {a: pick[(a, 1)] for a in ("default", "noise:0", "hybrid:0", "identity")} == {
        "default": 8e-3, "noise:0": 8e-3, "hybrid:0": 8e-3, "identity": 8e-3}


def test_documented_gaps_at_3_epochs(both) -> None:
    seeds, chosen = both
    gaps = _fair_gaps(seeds, chosen)
    pick = chosen.set_index(["arm", "epochs"])["lr"]
    assert pick[("noise:0", 3)] == pytest.approx(4e-3)
    assert pick[("default", 3)] == pytest.approx(8e-3)
    row = gaps[(gaps["arm"] == "noise:0") & (gaps["epochs"] == 3)].iloc[0]
    # docs/vit-fair.md: noise:0 at its own rate, 3 epochs: -2.0 [-3.0, -1.1]; at 2e-3: -3.3
    assert row[["gap", "gap_lo", "gap_hi"]].astype(float).round(1).tolist() == [-2.0, -3.0, -1.1]
    assert round(float(row["gap_fixed"]), 1) == -3.3
    assert int(row["pairs"]) == 12 and bool(row["complete"])
    one = gaps[gaps["epochs"] == 1].set_index("arm")[["gap", "gap_lo", "gap_hi"]].round(1)
    assert one.loc["noise:0"].tolist() == [-5.0, -7.1, -2.9]


def test_documented_gaps_at_10_epochs(both) -> None:
    """docs/vit-fair.md and README: at 10 epochs every arm chooses 4e-3 (inside the grid);
    noise:0 -1.0 [-1.7, -0.4], hybrid:0 -1.8 [-2.3, -1.3], identity -5.2 [-5.6, -4.7]."""
    seeds, chosen = both
    ten = chosen[chosen["epochs"] == 10].set_index("arm")
    assert (ten["lr"] == 4e-3).all() and not ten["edge"].any()
    gaps = _fair_gaps(seeds, chosen)
    got = gaps[gaps["epochs"] == 10].set_index("arm")[["gap", "gap_lo", "gap_hi"]].round(1)
    assert got.loc["noise:0"].tolist() == [-1.0, -1.7, -0.4]
    assert got.loc["hybrid:0"].tolist() == [-1.8, -2.3, -1.3]
    assert got.loc["identity"].tolist() == [-5.2, -5.6, -4.7]
    fixed = gaps[gaps["epochs"] == 10].set_index("arm")["gap_fixed"].round(1)
    assert fixed["noise:0"] == -1.0


def test_documented_30_epochs(both) -> None:
    """docs/vit-fair.md and README at 30 epochs (all 20 cells; at 8e-3 training breaks down):
    default chooses 2e-3, noise:0 4e-3, inside the grid; noise:0 -0.3 [-0.9, +0.3], hybrid:0
    -1.7 [-2.2, -1.2], identity -3.6 [-4.1, -3.1]; with both at 2e-3, noise:0 -0.6 [-1.1, -0.2];
    default gains +1.2 [+0.9, +1.6] over its last 10 epochs and +4.4 [+3.9, +4.9] from 10."""
    from tokensde.vit.fair_stats import _plateau

    seeds, chosen = both
    assert len(seeds[seeds["epochs"] == 30]) == 20 * 12
    thirty = chosen[chosen["epochs"] == 30]
    assert thirty["complete"].all() and not thirty["edge"].any()
    gaps = _fair_gaps(seeds, chosen)
    g = gaps[gaps["epochs"] == 30].set_index("arm")
    assert g["complete"].all()
    assert g["lr"].to_dict() == {"default": 2e-3, "noise:0": 4e-3, "hybrid:0": 2e-3,
                                 "identity": 4e-3}
    got = g[["gap", "gap_lo", "gap_hi"]].round(1)
    assert got.loc["noise:0"].tolist() == [-0.3, -0.9, 0.3]
    assert got.loc["hybrid:0"].tolist() == [-1.7, -2.2, -1.2]
    assert got.loc["identity"].tolist() == [-3.6, -4.1, -3.1]
    assert round(float(g.loc["noise:0", "gap_fixed"]), 1) == -0.6
    assert (g["half_width"].dropna() <= 1.5).all()
    level = _plateau(seeds, chosen)
    assert [round(x, 1) for x in level["last_third"]] == [1.2, 0.9, 1.6]
    assert [round(x, 1) for x in level["budget_change"]] == [4.4, 3.9, 4.9]
    val = thirty.set_index("arm")
    assert all(dict(zip(r["grid"], r["val_by_lr"], strict=True))[8e-3] < 50 for _, r in val.iterrows())


def test_resume_keeps_every_committed_cell(tmp_path: Path) -> None:
    copy = tmp_path / "vit-fair"
    shutil.copytree(RESULTS, copy)
    before = sweep_status(copy)
    assert before["pending"] == before["total"] - before["done"]
    assert len(list((copy / "cells").glob("*.parquet"))) == before["done"]
