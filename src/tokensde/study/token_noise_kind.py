"""The stationary order parameter under independent token noise (docs/token-noise.md) as the
sweep kind `token_noise`.

One cell is one `tokensde.study.noise_threshold.stationary_order` estimate: `runs` systems of `n`
tokens with `M = I`, no common noise and token noise `tau`, from the uniform or the ordered
start, and the order parameter `r = |(1/n) sum_i x_i|` time-averaged over depth `[burn, T]`,
with its mean and standard error over runs. A cell gives `tau` itself or `ratio = tau / tau_c`,
`tau_c = critical_token_noise(beta, d, attention)` the theory's threshold; the canonical cell
carries both. The study's scans are `tokensde/study/sweeps/token-noise-*.toml`.
"""

from __future__ import annotations

import math
from typing import Any

from ..model.params import ParameterError, _check_real
from ..sweep.kinds import ExperimentKind, Param, _choice, _integer, _Stats, real, register
from ..theory.token_noise import ATTENTIONS

KIND = "token_noise"
# the study tabulates these columns of a token_noise sweep table, in this order
_COLUMNS: tuple[str, ...] = (
    "d", "attention", "beta", "n", "start", "scheme", "ratio", "tau", "tau_c", "runs", "T",
    "burn", "dt", "step_shift", "r", "se", "r2", "r2_se", "n_r2", "q", "q_se", "n_q2", "drift",
    "drift_se", "seed", "wall_s")


def _optional_real(minimum: float, strict: bool, doc: str) -> Param:
    def check(k: str, v: Any) -> float | None:
        return None if v is None else _check_real(k, v, minimum, strict)
    return Param(check, None, doc)


def _tau_c(cell: dict[str, Any]) -> float:
    from .noise_threshold import critical_token_noise

    return critical_token_noise(cell["beta"], cell["d"], cell["attention"])


def _finalize(cell: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """Resolve `ratio` into `tau = ratio * tau_c` (rounded to 9 digits) and a missing `burn`
    into `T / 2`; idempotent (a canonical cell carries both `ratio` and the `tau` it gives)."""
    tau, ratio = cell["tau"], cell["ratio"]
    if ratio is not None:
        cell["tau"] = round(ratio * _tau_c(cell), 9)
    if cell["tau"] is None or (ratio is not None and tau not in (None, cell["tau"])):
        raise ParameterError("give exactly one of tau (token noise, >= 0) and ratio "
                             f"(tau / tau_c, > 0); got tau={tau!r}, ratio={ratio!r}")
    if cell["burn"] is None:
        cell["burn"] = cell["T"] / 2
    if not cell["burn"] < cell["T"]:
        raise ParameterError(f"burn must be < T = {cell['T']:g}; got {cell['burn']!r}")
    if cell["dt"] > cell["T"]:
        raise ParameterError(f"dt must be <= T = {cell['T']:g}; got {cell['dt']!r}")
    return cell


def _token_noise_cell(cell: dict[str, Any], seed: int) -> _Stats:
    """The stationary order parameter of one cell (`study.noise_threshold.stationary_order`):
    `r`, `se` (over runs), `r2`, `r2_se`, `n_r2 = n E r^2`, the degree-2 `q`, `q_se`,
    `n_q2 = n E q^2`, `drift` / `drift_se` (second half of `[burn, T]` minus the first), each
    run's `run_r`, `tau_c`, and `step_shift`, the step's relative shift of the many-token
    threshold (`study.noise_threshold.step_error`), the step-error estimate beside `se`."""
    from .noise_threshold import stationary_order

    e = stationary_order(cell["tau"], cell["n"], cell["d"], cell["beta"], cell["attention"],
                         runs=cell["runs"], T=cell["T"], burn=cell["burn"], dt=cell["dt"],
                         scheme=cell["scheme"], seed=seed, samples=cell["samples"],
                         start=cell["start"], step_tol=None)
    tau_c = _tau_c(cell)
    return {"tau_c": tau_c, "tau_ratio": e.token_noise / tau_c if tau_c > 0 else math.nan,
            "r": e.r, "se": e.se, "r2": e.r2, "r2_se": e.r2_se, "n_r2": e.n * e.r2,
            "drift": e.drift, "drift_se": e.drift_se, "run_r": list(e.run_r),
            "q": e.q, "q_se": e.q_se, "n_q2": e.n * e.q2, "step_shift": e.step_shift,
            "attention_eval": e.attention_eval, "sim_wall_s": e.wall_s}


def _token_noise_budget(cell: dict[str, Any]) -> Any:
    """Memory and work of a cell (`study.noise_threshold._order_budget`)."""
    from .noise_threshold import _order_budget

    return _order_budget(cell["tau"], cell["n"], cell["d"], cell["beta"], cell["attention"],
                        cell["runs"], cell["T"], cell["dt"], cell["samples"])


register(ExperimentKind(
    KIND,
    _token_noise_cell,
    {
        "d": _integer(2, 2, "dimension"),
        "attention": _choice(ATTENTIONS, "usa", "usa | softmax"),
        "beta": real(0.0, 1.0, strict=True, doc="attention strength"),
        "tau": _optional_real(0.0, False, "token noise (or give ratio)"),
        "ratio": _optional_real(0.0, True, "tau / tau_c, tau_c the theory's threshold"),
        "n": _integer(1, doc="tokens"),
        "runs": _integer(2, doc="independent systems (the standard error is over runs)"),
        "T": real(0.0, strict=True, doc="horizon in depth time"),
        "burn": _optional_real(0.0, False, "depth time left out of the average (default T/2)"),
        "dt": real(0.0, 0.05, strict=True, doc="layer step"),
        "samples": _integer(2, 41, "checkpoints over [0, T] (those at times >= burn averaged)"),
        "start": _choice(("uniform", "ordered"), "uniform",
                        "uniform: i.i.d. uniform tokens; ordered: every token at e_1"),
        "scheme": _choice(("network", "sde"), "network"),
    },
    "n tokens under independent token noise (M = I, sigma = 0): stationary order parameter",
    finalize=_finalize,
    budget=_token_noise_budget,
))
