"""`absorption_table` and `run_coupled` reproduce the values saved from the code that
computed the published absorption table (tests/data/meanfield_reference.npz).

The saved values come from the frozen copy of that code (HEAD 7cfb8c6 plus the merging changes of
the table's run), where `run_coupled` had its own layer loop (`meanfield.flow._advance`):
`PYTHONPATH=<frozen>/src python tests/test_meanfield_reference.py --write`. Since the flow runs
through the one layer loop `tokensde.sim.loop._march` it must give them unchanged: floats compared
with `==` (nan where nan; the final token coordinates to 1e-12, see `COORD_ATOL`), integers
and strings exactly. The cases: the absorption table on the
circle (beta 1 and 3) and the sphere with both starts, and `run_coupled` itself until the horizon,
without merging, on one shared path, with a batch smaller than the runs and with the SDE scheme.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tokensde import ModelParams, TimeGrid
from tokensde.meanfield.absorption import _particle_starts, absorption_table
from tokensde.meanfield.flow import run_coupled
from tokensde.meanfield.quadrature import _density_weights, sphere_rule
from tokensde.sim import Execution, StoppingRule

DATA = Path(__file__).parent / "data" / "meanfield_reference.npz"

# (d, beta, ns, K, runs, T): the absorption tables, each with both starts
TABLES = [(2, 1.0, [16, 300], 64, 6, 6.0), (2, 3.0, [16, 300], 64, 6, 6.0),
          (3, 3.0, [16, 300], 32, 4, 4.0)]
# the direct calls of run_coupled: name -> keyword arguments beside the systems
FLOWS: dict[str, dict[str, Any]] = {
    "decided": {},
    "horizon": {"stopping": StoppingRule()},
    "no_merge": {"merge_tol": None},
    "shared": {"shared_path": True},
    "batch": {"execution": Execution(batch_size=4)},
    "batch_horizon": {"execution": Execution(batch_size=4),
                      "stopping": StoppingRule(), "merge_every": 7},
    "sde": {"scheme": "sde", "stopping": StoppingRule.decided(1e-3, 3)},
}


def _flat(prefix: str, value: Any, out: dict[str, np.ndarray]) -> None:
    out[prefix] = np.asarray("None" if value is None else value)


def compute() -> dict[str, np.ndarray]:
    """Every row value and minority mass of the tables, and the final nodes, weights and decision
    layers of the direct calls."""
    out: dict[str, np.ndarray] = {}
    for d, beta, ns, K, runs, T in TABLES:
        for start in ("iid", "quasi"):
            rows, masses = absorption_table(d, beta, ns, K, start, runs, 0, T, 0.02,
                                            stopping=StoppingRule.decided(1e-4), with_limit=True)
            case = f"table/d{d}/b{beta:g}/{start}"
            for i, row in enumerate(rows):
                for key, value in row.items():
                    _flat(f"{case}/row{i}/{key}", value, out)
            for n, m in masses.items():
                out[f"{case}/mass/{n}"] = m
    for d in (2, 3):  # runs decided at different layers, one (d = 2) never
        p = ModelParams(n=2, d=d, beta=4.0)
        runs, K = 6, 24
        nodes, q = sphere_rule(K, d)
        systems = [("limit", nodes, _density_weights(nodes, q, None)),
                   ("n6", _particle_starts(6, d, runs, "iid", 3), None),
                   ("n20", _particle_starts(20, d, runs, "iid", 3), None)]
        for name, kw in FLOWS.items():
            res = run_coupled(p, TimeGrid.make(T=8.0, dt=0.05), systems, runs=runs, seed=7,
                              **{"stopping": StoppingRule.decided(1e-3), "merge_tol": 1e-6,
                                 **kw})
            out[f"flow/d{d}/{name}/decided_at"] = res.decided_at
            for s, sname in enumerate(res.names):
                out[f"flow/d{d}/{name}/{sname}/x"] = res.x[s].numpy()
                out[f"flow/d{d}/{name}/{sname}/w"] = res.w[s].numpy()
    return out


# float64 token coordinates agree to the last bits only on the CPU kind that wrote the file:
# torch's matrix products take other kernels on AVX-512 than on AVX2 and round differently (1e-15
# here). Every table value, count, decision layer and string must still be equal.
COORD_ATOL = 1e-12


def differences(ref: dict[str, np.ndarray], now: dict[str, np.ndarray]) -> list[str]:
    """The keys whose values differ (token coordinates `/x` beyond `COORD_ATOL`, other floats by
    `==`, nan equal to nan), or that only one holds."""
    bad = sorted(set(ref) ^ set(now))
    for key in sorted(set(ref) & set(now)):
        a, b = ref[key], now[key]
        if not (a.shape == b.shape and a.dtype == b.dtype):
            bad.append(key)
            continue
        if a.dtype.kind not in "fc":
            same = np.array_equal(a, b)
        elif key.endswith("/x"):
            same = np.allclose(a, b, rtol=0.0, atol=COORD_ATOL, equal_nan=True)
        else:
            same = np.array_equal(a, b, equal_nan=True)
        if not same:
            bad.append(key)
    return bad


@pytest.mark.slow
def test_meanfield_reproduces_the_frozen_table_code():
    ref = dict(np.load(DATA))
    assert differences(ref, compute()) == []


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        np.savez_compressed(DATA, **compute())
    elif len(sys.argv) == 3 and sys.argv[1] == "--save":
        np.savez_compressed(sys.argv[2], **compute())
    else:
        raise SystemExit("usage: test_meanfield_reference.py --write | --save FILE")
