"""The step error of a two-token probability, reported beside its Monte Carlo error.

The network at layer step `dt` ends antipodal with probability `P(dt) = P_anti + c dt + O(dt^2)`,
`P_anti` the exact value of its depth limit (spec §5). No closed form of `c` is derived here; it
is measured once per key `(beta, d, rho0)` at the two steps `0.2/d` and `0.4/d` against the exact
`P_anti` (`CALIBRATION`, written by `diagnostics/two_token_step_calibration.py`, whose command
and output docs/simulate.md gives), and scaled to the step of the run: `bias = c dt`, with the
standard error of `c` times `dt`. Where the bias is of higher order in dt (a ratio of the two
biases above 2), the linear scaling overstates it at smaller steps: the estimate errs towards a
warning. Keys outside the table have no estimate, and say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..model.params import ModelParams
from .pair_monte_carlo import spec_params

CALIBRATION_COMMAND = (
    "OMP_NUM_THREADS=1 python diagnostics/two_token_step_calibration.py --runs 20000")


@dataclass(frozen=True)
class Calibration:
    """One measured key: `c = dP/d(dt)` at `(beta, d, rho0)` and its standard error, from
    `runs` runs at each of the steps `dts`; `z_linear` compares the two biases' ratio with 2."""

    beta: float
    d: int
    rho0: float
    c: float
    c_se: float
    dts: tuple[float, float]
    runs: int
    z_linear: float


#: the measured keys, 20000 runs per step (`CALIBRATION_COMMAND`, 5 min on one core; its output
#: in docs/simulate.md, "Step error of two-token probabilities"): beta, d, rho0, c, se(c), the
#: two steps, runs, z of the biases' ratio against 2
CALIBRATION: tuple[Calibration, ...] = (
    Calibration(2.0, 4, -0.5, -0.1134, 0.0315, (0.2 / 4, 0.4 / 4), 20000, -2.34),
    Calibration(1.0, 3, 0.0, -0.1866, 0.0190, (0.2 / 3, 0.4 / 3), 20000, -0.14),
    Calibration(2.5, 10, 0.0, -0.3373, 0.0495, (0.2 / 10, 0.4 / 10), 20000, -0.10),
    Calibration(3.0, 3, 0.5, -0.1086, 0.0182, (0.2 / 3, 0.4 / 3), 20000, -1.49),
    Calibration(2.0, 5, 0.0, -0.2310, 0.0299, (0.2 / 5, 0.4 / 5), 20000, -0.01),
)


@dataclass(frozen=True)
class StepError:
    """The estimated step error `P(dt) - P(0)` of a probability at step `dt`, first order in
    `dt` (`bias`, None where there is no estimate, with the reason in `source`)."""

    bias: float | None
    se: float
    dt: float
    source: str

    def verdict(self, mc_se: float) -> str:
        """'below' when `|bias| < mc_se`, 'not below' otherwise, 'unknown' without an estimate
        or without a Monte Carlo error (nan: no decided run)."""
        if self.bias is None or not math.isfinite(mc_se):
            return "unknown"
        return "below" if abs(self.bias) < mc_se else "not below"

    def text(self, mc_se: float) -> str:
        """One line: the estimate, its source and how it compares with the Monte Carlo error."""
        if self.bias is None:
            return f"step error not estimated ({self.source})"
        head = f"step error {self.bias:+.4f} ± {self.se:.4f} at dt = {self.dt:g} ({self.source})"
        if not math.isfinite(mc_se):
            return head + "; no Monte Carlo error (no decided run)"
        head += f"; Monte Carlo error {mc_se:.4f}"
        if self.verdict(mc_se) == "below":
            return head + ": the step error is below it"
        return head + f": the step error is NOT below it (about dt = {self.safe_dt(mc_se):.3g} " \
            f"would make it so)"

    def safe_dt(self, mc_se: float) -> float:
        """The step at which the first-order bias equals half the Monte Carlo error `mc_se`."""
        if self.bias is None or self.bias == 0.0:
            return self.dt
        return self.dt * 0.5 * mc_se / abs(self.bias)

    def to_dict(self, mc_se: float) -> dict[str, Any]:
        """JSON-ready form, with the Monte Carlo error it was compared with."""
        return {"bias": self.bias, "se": None if self.bias is None else self.se, "dt": self.dt,
                "source": self.source, "mc_se": mc_se, "verdict": self.verdict(mc_se),
                "text": self.text(mc_se)}


def mc_error(p: float, decided: int) -> float:
    """The Monte Carlo standard error `sqrt(p (1 - p) / decided)` of a fraction (nan for no
    decided run)."""
    if decided <= 0 or not math.isfinite(p):
        return math.nan
    return math.sqrt(p * (1.0 - p) / decided)


def pair_step_error(p: ModelParams, rho0: float | str, dt: float, scheme: str = "network"
                    ) -> StepError:
    """The step error of `P_anti` for the two-token model `p` from `rho0` at step `dt`:
    `c dt` from the calibrated key `(p.beta, p.d, rho0)` (`CALIBRATION`), or no estimate (the
    reason in `source`) for another model, scheme or key.

    Args:
        p: the model; estimated only for `monte_carlo`'s (softmax, Gaussian matrix noise of
            scale 1, M = 0, n = 2, no variant).
        rho0: the initial inner product, or 'uniform'.
        dt: the layer step.
        scheme: 'network' (calibrated) or 'sde' (not).

    Returns:
        The `StepError`.
    """
    if scheme != "network":
        return StepError(None, math.nan, dt, f"scheme {scheme!r} is not calibrated")
    if p.n != 2 or p != spec_params(p.beta, p.d):
        return StepError(None, math.nan, dt, "calibrated only for two tokens of the spec model: "
                         "softmax, Gaussian matrix noise of scale 1, no variant")
    for cal in CALIBRATION:
        if (cal.d == p.d and math.isclose(cal.beta, p.beta, abs_tol=1e-12)
                and not isinstance(rho0, str) and math.isclose(cal.rho0, rho0, abs_tol=1e-12)):
            return StepError(cal.c * dt, cal.c_se * dt, dt,
                             f"first order, calibrated at dt = {cal.dts[0]:g} and {cal.dts[1]:g}")
    keys = ", ".join(f"({c.beta:g}, {c.d}, {c.rho0:g})" for c in CALIBRATION)
    return StepError(None, math.nan, dt, f"(beta, d, rho0) = ({p.beta:g}, {p.d}, {rho0}) is not "
                     f"calibrated; calibrated: {keys}; run at dt/2 to see it")


def add_step_errors(summary: dict[str, Any], p: ModelParams, start: float | str | None,
                    dt: float, scheme: str = "network") -> None:
    """Put the step error of `p_bipolar` (`pair_step_error`; P_anti at n = 2) and of its
    complement `p_one_cluster` beside their Monte Carlo errors, as `summary[name]['step_error']`
    (`summary` of `clusters.outcome_summary`; `start`: rho0, 'uniform', or None for a start
    given as an array); 'not estimated' with the reason where there is no calibration.

    Args:
        summary: the summary, changed in place.
        p: the model.
        start: the two tokens' start.
        dt: the layer step.
        scheme: 'network' or 'sde'.
    """
    step = (StepError(None, math.nan, dt, "a start given as an array is not calibrated")
            if start is None else pair_step_error(p, start, dt, scheme))
    for name, sign in (("p_bipolar", 1.0), ("p_one_cluster", -1.0)):
        est = summary.get(name)
        if est is not None:
            s = step if step.bias is None else replace(step, bias=sign * step.bias)
            est["step_error"] = s.to_dict(mc_error(est["p"], est["decided"]))
