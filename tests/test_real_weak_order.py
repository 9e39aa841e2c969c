"""The committed weak-order run of tokensde's GPT-2 model (benchmarks/results/real-order): the
errors, standard errors and fitted orders that the JSON and docs/real.md quote are recomputed
from the per-init differences (`diagnostics/real_weak_order.py fit`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tokensde.analysis.convergence import (
    RESOLVE_Z,
    fit_order,
    poisson_weights,
    weak_levels_used,
    weighted_means,
)
from tokensde.sim.rng import derive_seed

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "real-order"
DOC = ROOT / "docs" / "real.md"


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, dict]:
    z = np.load(RESULTS / "per_init.npz")
    return z["diff"], z["levels"], json.loads((RESULTS / "real_weak_order.json").read_text())


def _errors(per_init: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return per_init.mean(0), per_init.std(0, ddof=1) / math.sqrt(per_init.shape[0])


@pytest.mark.parametrize("key", ["f1", "avg"])
def test_errors_and_fit_recomputed(data: tuple[np.ndarray, np.ndarray, dict], key: str) -> None:
    diff, lv, out = data
    per_init = diff[:, :, -1] if key == "f1" else diff.mean(-1)
    e, se = _errors(per_init)
    rows = out[key]["rows"]
    assert [r["L"] for r in rows] == lv.tolist() == out["design"]["levels"]
    assert np.allclose([r["E"] for r in rows], e, rtol=0, atol=1e-12)
    assert np.allclose([r["se"] for r in rows], se, rtol=0, atol=1e-12)
    assert [r["resolved"] for r in rows] == (np.abs(e) >= RESOLVE_Z * se).tolist()
    used = weak_levels_used(e, se)
    assert out[key]["levels_used"] == lv[used].tolist()
    w = poisson_weights(per_init.shape[0], out["design"]["bootstrap"],
                        derive_seed(out["design"]["seed"], 5))
    f = fit_order(lv[used], e[used], weighted_means(per_init.T, w)[:, used])
    fit = out[key]["fit"]
    assert fit["order"] == pytest.approx(f.order, abs=1e-12)
    assert (fit["boot_lo"], fit["boot_hi"]) == pytest.approx((f.boot_lo, f.boot_hi), abs=1e-12)
    assert out["design"]["inits"] == diff.shape[0]


def test_docs_quote_the_committed_numbers(data: tuple[np.ndarray, np.ndarray, dict]) -> None:
    _, _, out = data
    text = DOC.read_text()
    for a, b in zip(out["f1"]["rows"], out["avg"]["rows"], strict=True):
        row = (f"| {a['L']} | {a['E']:+.4f} ({a['se']:.4f}) | {a['E'] / a['se']:+.1f} | "
               f"{b['E']:+.4f} ({b['se']:.4f}) | {b['E'] / b['se']:+.1f} |")
        assert row in text, row
    for key in ("f1", "avg"):
        f = out[key]["fit"]
        quoted = f"p = {f['order']:.2f} [{f['boot_lo']:.2f}, {f['boot_hi']:.2f}]"
        assert quoted in text, quoted
    assert f"{out['design']['inits']} inits x {out['design']['inputs_per_init']}" in text
