"""Sweep kind `meanfield`: one cell is one token system (n particles, or the K-node limit for
n = 0) of the pure-noise model, run on `runs` noise paths until absorption; its statistics are
those of `tokensde.meanfield.absorption._system_stats`, plus each run's minority mass.

`table_config` is `tokensde meanfield table` as a sweep of this kind: every system of a
(d, beta) takes the same `path_seed`, so the limit and the particles of every n, from either
start, run on the same noise paths (the draws of a path do not depend on the systems run beside
it), and the table resumes cell by cell like any sweep.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..model.params import ParameterError, _check_int, _check_real
from ..sim.budget import Budget
from ..sim.options import Execution, StoppingRule
from ..sim.rng import derive_seed
from ..sweep import SweepConfig
from ..sweep.kinds import _KINDS, ExperimentKind, Param, _choice, _integer, real, register
from .absorption import _DEFAULT_STARTS, _LIMIT, STARTS, _parse_mixture, absorption_table, table_budget

KIND = "meanfield"
# parameters left out of the canonical cell at their defaults, so that the ids and seeds of the
# cells of earlier sweeps are unchanged
_OPTIONAL: dict[str, Any] = {"path_seed": None, "device": "cpu", "mixture": None}
# the columns of `table_frame` that come from the cell's parameters, in this order
_PARAM_COLUMNS = ("d", "beta", "n", "K", "start", "seed", "tol")


def _meanfield_budget(cell: dict[str, Any]) -> Budget:
    """Memory and work of one meanfield cell (`absorption.table_budget`).

    Args:
        cell: A canonical cell of the kind.

    Returns:
        The `Budget` of that one system.
    """
    n = cell["n"]
    return table_budget([cell["d"]], [cell["beta"]], [] if n == _LIMIT else [n], cell["K"],
                        [cell["start"]], cell["runs"], cell["T"], cell["dt"],
                        with_limit=n == _LIMIT, execution=_execution(cell))


def _execution(cell: dict[str, Any]) -> Execution:
    """The execution of a meanfield cell's flow: its device."""
    return Execution(device=cell.get("device", _OPTIONAL["device"]))


def _meanfield_cell(cell: dict[str, Any], seed: int) -> dict[str, Any]:
    """P(bipolar), the minority-mass law, atoms and time to decision of one system, on the noise
    paths of `path_seed` when the cell gives one (else of `seed`); `minority_runs` is each run's
    minority mass (nan where undecided).

    Args:
        cell: A canonical cell of the kind.
        seed: The cell's seed (from the sweep).

    Returns:
        The statistics of `absorption._system_stats` and `minority_runs`.
    """
    n = cell["n"]
    paths = cell.get("path_seed")
    mix = cell.get("mixture")
    if mix is not None and cell["start"] != "mixture":
        raise ParameterError(f"mixture is the law of start='mixture'; got start={cell['start']!r}")
    rows, masses = absorption_table(cell["d"], cell["beta"], [] if n == _LIMIT else [n], cell["K"],
                                    cell["start"], cell["runs"], seed if paths is None else paths,
                                    cell["T"], cell["dt"],
                                    stopping=StoppingRule.decided(cell["tol"]),
                                    execution=_execution(cell),
                                    with_limit=n == _LIMIT,
                                    mixture=None if mix is None else _parse_mixture(mix, cell["d"]))
    params = {*_KINDS[KIND].params, "seed"}  # the sweep's table has them as columns already
    stats = {k: v for k, v in rows[0].items() if k not in params}
    return {**stats, "minority_runs": [float(v) for v in masses[n]]}


def _finalize(cell: dict[str, Any], given: set[str]) -> dict[str, Any]:
    for key, default in _OPTIONAL.items():
        if cell[key] == default:
            del cell[key]
    return cell


def _path_seed(k: str, v: Any) -> int | None:
    return None if v is None else _check_int(k, v, 0)


def _mixture(k: str, v: Any) -> str | None:
    if v is None:
        return None
    _parse_mixture(v, 2)  # the form; the dimension is checked when the cell runs
    return str(v)


def _check_device(name: str, value: Any) -> str:
    """`value` if it names a torch device a cell can run on: 'cpu', 'cuda' or 'cuda:N'.

    Args:
        name: The parameter or option, named in the error.
        value: The device.

    Returns:
        `value`; ParameterError naming `name` otherwise.
    """
    if not isinstance(value, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", value):
        raise ParameterError(f"{name} must be cpu, cuda or cuda:N; got {value!r}")
    return value


register(ExperimentKind(KIND, _meanfield_cell, {
    "d": _integer(2, doc="dimension"),
    "beta": real(0.0, doc="attention strength"),
    "n": _integer(0, doc="particles; 0 = the limit at K nodes"),
    "K": _integer(2, 256, doc="limit nodes (rule: circle d = 2, gauss d = 3, qmc d > 3)"),
    "start": _choice(STARTS, "iid", "particle start: iid uniform | quasi (quasi-uniform set) | "
                                   "mixture (iid from the von Mises mixture `mixture`)"),
    "runs": _integer(1, 100, doc="noise paths"),
    "T": real(0.0, 40.0, strict=True, doc="horizon (depth time)"),
    "dt": real(0.0, 0.02, strict=True, doc="layer step (dt = alpha^2)"),
    "tol": real(0.0, 1e-4, strict=True, doc="decision tolerance on 1 - |<x_i, x_j>|"),
    "path_seed": Param(_path_seed, None, "seed of the noise paths and i.i.d. starts (default: "
                                         "the cell's seed); cells with the same one share paths"),
    "device": Param(_check_device, "cpu", "torch device: cpu, cuda or cuda:N"),
    "mixture": Param(_mixture, None, "law of start='mixture', MASS:KAPPA:ANGLE[;...] "
                                     "(default 1:1:0: von Mises, kappa 1 about e_1)"),
}, "P(bipolar), the minority-mass law, atoms and time to decision of one system.",
    finalize=_finalize, budget=_meanfield_budget))


def table_config(ds: Sequence[int], betas: Sequence[float], ns: Sequence[int], K: int,
                 starts: Sequence[str] = _DEFAULT_STARTS, runs: int = 100, seed: int = 0,
                 T: float = 40.0, dt: float = 0.02, tol: float = 1e-4,
                 device: str = "cpu", mixture: str | None = None) -> SweepConfig:
    """`absorption.run_table` as a sweep of kind `meanfield`: for every start, d and beta (in this
    order, i.i.d. starts first) the limit (n = 0) and each n of `ns`, all on the noise paths of
    `path_seed = derive_seed(seed, d, round(1000 beta))`.

    Args:
        ds: Dimensions.
        betas: Attention strengths.
        ns: Particle counts (each >= 2).
        K: Nodes of the limit measure.
        starts: Particle starts, 'iid', 'quasi' and/or 'mixture'.
        runs: Noise paths a cell.
        seed: Root seed.
        T: Depth time of the horizon.
        dt: Layer step.
        tol: Decision tolerance.
        device: Torch device of every cell.
        mixture: The law of the 'mixture' start (`absorption._parse_mixture`; None: its default).

    Returns:
        The `SweepConfig` (its cells validated when listed).
    """
    seed = _check_int("seed", seed, 0)
    sizes = [_LIMIT, *(_check_int("n", n, 2) for n in ns)]
    params: dict[str, Any] = {"K": K, "dt": dt, "tol": tol}
    if device != _OPTIONAL["device"]:
        params["device"] = device
    grid = [{"start": [st], "d": [d], "beta": [b], "n": sizes,
             "path_seed": [derive_seed(seed, _check_int("d", d, 2),
                                       round(1000 * _check_real("beta", b, 0.0)))],
             **({"mixture": [mixture]} if st == "mixture" and mixture is not None else {})}
            for st in starts for d in ds for b in betas]
    if not grid:
        raise ParameterError("give at least one of each of d, beta and start")
    return SweepConfig.from_dict({"name": "meanfield-table", "kind": KIND, "seed": seed,
                                  "runs": runs, "T": T, "params": params, "grid": grid},
                                 where="meanfield table")


def table_frame(sweep_table: pd.DataFrame) -> pd.DataFrame:
    """The finished cells of a `table_config` sweep (`tokensde.sweep.load_table`) as the rows of
    `absorption.run_table`: d, beta, n, K (the node count: K for the limit, n for particles),
    start, seed (the noise paths'), tol, then the statistics, without the per-run masses.

    Args:
        sweep_table: The sweep's rows, one per cell.

    Returns:
        One row per finished system, in grid order.
    """
    ok = sweep_table[sweep_table["status"] == "ok"]
    out = pd.DataFrame({"d": ok["d"], "beta": ok["beta"], "n": ok["n"],
                        "K": ok["K"].where(ok["n"] == _LIMIT, ok["n"]), "start": ok["start"],
                        "seed": ok["path_seed"], "tol": ok["tol"]})
    skip = {"cell", "index", *_PARAM_COLUMNS, "T", "dt", "path_seed", "device", "minority_runs",
            "status", "error", "version"}
    stats = [c for c in ok.columns if c not in skip]
    return pd.concat([out, ok[stats]], axis=1).reset_index(drop=True)
