"""The committed half of the fair ViT protocol (benchmarks/results/vit-fair): the numbers that
docs/vit-fair.md and README quote are recomputed from its cells, and the sweep resumes there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tokensde.sweep.engine import fingerprint, load_table, sweep_status
from tokensde.vit.fair import choose_lr, fair_config, fair_gaps, per_seed

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "vit-fair"


@pytest.fixture(scope="module")
def seeds() -> pd.DataFrame:
    return per_seed(load_table(RESULTS))


def test_committed_cells_are_the_fair_size_with_1_and_3_epochs_done() -> None:
    st = sweep_status(RESULTS)
    assert st["kind"] == "vit_fair" and st["total"] == 80 and st["failed"] == 0
    assert st["done"] >= 40
    # the committed sweep is today's `fair` size, so `tokensde vit fair` resumes it
    assert st["fingerprint"] == fingerprint(fair_config("fair"), fair_config("fair").cells())


def test_documented_gaps_at_3_epochs(seeds: pd.DataFrame) -> None:
    chosen = choose_lr(seeds)
    gaps = fair_gaps(seeds, chosen)
    pick = chosen.set_index(["arm", "epochs"])["lr"]
    assert pick[("noise:0", 3)] == pytest.approx(4e-3)
    assert pick[("default", 3)] == pytest.approx(8e-3)
    row = gaps[(gaps["arm"] == "noise:0") & (gaps["epochs"] == 3)].iloc[0]
    # docs/vit-fair.md: noise:0 at its own rate, 3 epochs: -2.0 [-3.0, -1.1]; at 2e-3: -3.3
    assert row[["gap", "gap_lo", "gap_hi"]].astype(float).round(1).tolist() == [-2.0, -3.0, -1.1]
    assert round(float(row["gap_fixed"]), 1) == -3.3
    assert int(row["pairs"]) == 12


def test_resume_keeps_every_committed_cell(tmp_path: Path) -> None:
    copy = tmp_path / "vit-fair"
    shutil.copytree(RESULTS, copy)
    before = sweep_status(copy)
    assert before["pending"] == before["total"] - before["done"]
    assert len(list((copy / "cells").glob("*.parquet"))) == before["done"]
