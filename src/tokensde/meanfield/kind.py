"""Sweep kind `meanfield`: one cell is one token system (n particles, or the K-node limit for
n = 0) of the pure-noise model, run on `runs` noise paths until absorption; its statistics are
those of `tokensde.meanfield.absorption.system_stats`."""

from __future__ import annotations

from typing import Any

from ..sim.budget import Budget
from ..sweep.kinds import ExperimentKind, choice, integer, real, register
from .absorption import STARTS, absorption_table, table_budget


def meanfield_budget(cell: dict[str, Any]) -> Budget:
    """Memory and work of one meanfield cell (`absorption.table_budget`)."""
    n = cell["n"]
    return table_budget([cell["d"]], [cell["beta"]], [] if n == 0 else [n], cell["K"],
                        [cell["start"]], cell["runs"], cell["T"], cell["dt"], with_limit=n == 0)


def meanfield_cell(cell: dict[str, Any], seed: int) -> dict[str, Any]:
    """P(bipolar), the minority-mass law, atoms and time to decision of one system."""
    n = cell["n"]
    rows, _ = absorption_table(cell["d"], cell["beta"], [] if n == 0 else [n], cell["K"],
                               cell["start"], cell["runs"], seed, cell["T"], cell["dt"],
                               cell["tol"], with_limit=n == 0)
    row = rows[0]
    return {k: v for k, v in row.items() if k not in ("d", "beta", "n", "K", "start", "seed",
                                                      "tol")}


register(ExperimentKind("meanfield", meanfield_cell, {
    "d": integer(2, doc="dimension"),
    "beta": real(0.0, doc="attention strength"),
    "n": integer(0, doc="particles; 0 = the limit at K nodes"),
    "K": integer(2, 256, doc="limit nodes (rule: circle d = 2, gauss d = 3, qmc d > 3)"),
    "start": choice(STARTS, "iid", "particle start: iid uniform | quasi (quasi-uniform set)"),
    "runs": integer(1, 100, doc="noise paths"),
    "T": real(0.0, 40.0, strict=True, doc="horizon (depth time)"),
    "dt": real(0.0, 0.02, strict=True, doc="layer step (dt = alpha^2)"),
    "tol": real(0.0, 1e-4, strict=True, doc="decision tolerance on 1 - |<x_i, x_j>|"),
}, "P(bipolar), the minority-mass law, atoms and time to decision of one system.",
    budget=meanfield_budget))
