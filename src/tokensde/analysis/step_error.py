"""The step error of a probability, reported beside its Monte Carlo error.

A probability read from the network at layer step `dt` is off its depth limit by a step error
`P(dt) - P(0)`. No closed form of it is derived; `analysis.step_coupled` measures it at run time
by coupling the run's step with twice and four times it (with an order check). A `StepError`
holds one estimate and says how it compares with the Monte Carlo error (`verdict`, `text`).
There is no committed table: a fixed table scaled as `c dt` was wrong away from its steps where
the step error is not first order (docs/simulate.md, "Step error").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["StepError"]


@dataclass(frozen=True)
class StepError:
    """The estimated step error `P(dt) - P(0)` of a probability at step `dt` (`bias` with its
    error `se`, None where there is no estimate; `source` says how it was obtained, or why not);
    `resolve`: a measured estimate, compared with the Monte Carlo error through its interval
    `bias +- 2 se` (else by its value)."""

    bias: float | None
    se: float
    dt: float
    source: str
    resolve: bool = False

    def verdict(self, mc_se: float) -> str:
        """'below' when `|bias| < mc_se`, 'not below' otherwise, 'unknown' without an estimate
        or without a Monte Carlo error (nan: no decided run); with `resolve`, 'below' when
        `|bias| + 2 se < mc_se`, 'not below' when `|bias| - 2 se > mc_se`, else 'not resolved'."""
        if self.bias is None or not math.isfinite(mc_se):
            return "unknown"
        if self.bias == 0.0 and not self.se > 0.0:
            return "below"
        if not self.resolve:
            return "below" if abs(self.bias) < mc_se else "not below"
        if abs(self.bias) + 2 * self.se < mc_se:
            return "below"
        return "not below" if abs(self.bias) - 2 * self.se > mc_se else "not resolved"

    def text(self, mc_se: float) -> str:
        """One line: the estimate, its source and how it compares with the Monte Carlo error."""
        if self.bias is None:
            return f"step error not estimated ({self.source})"
        head = f"step error {self.bias:+.4f} ± {self.se:.4f} at dt = {self.dt:g} ({self.source})"
        if not math.isfinite(mc_se):
            return head + "; no Monte Carlo error (no decided run)"
        head += f"; Monte Carlo error {mc_se:.4f}"
        verdict = self.verdict(mc_se)
        if verdict == "below":
            return head + ": the step error is below it"
        if verdict == "not resolved":
            return head + ": not resolved against it (the step error is within 2 standard " \
                f"errors of it; more coupled runs would tell, and about dt = " \
                f"{self.safe_dt(mc_se):.3g} would make even its upper end below it)"
        return head + f": the step error is NOT below it (about dt = {self.safe_dt(mc_se):.3g} " \
            f"would make it so)"

    def safe_dt(self, mc_se: float) -> float:
        """The step at which the first-order bias equals half the Monte Carlo error `mc_se`
        (with `resolve`: at which its upper end `|bias| + 2 se` equals `mc_se`)."""
        if self.bias is None or (self.bias == 0.0 and not self.se > 0.0):
            return self.dt
        if self.resolve:
            return self.dt * mc_se / (abs(self.bias) + 2 * self.se)
        return self.dt * 0.5 * mc_se / abs(self.bias)

    def to_dict(self, mc_se: float) -> dict[str, Any]:
        """JSON-ready form, with the Monte Carlo error it was compared with."""
        return {"bias": self.bias, "se": None if self.bias is None else self.se, "dt": self.dt,
                "source": self.source, "mc_se": mc_se, "verdict": self.verdict(mc_se),
                "text": self.text(mc_se)}


def mc_error(p: float, decided: int) -> float:
    """The Monte Carlo standard error `sqrt(p (1 - p) / decided)` of a fraction.

    Args:
        p: the fraction, in [0, 1].
        decided: the runs it is taken over.

    Returns:
        The standard error (nan for no decided run or a p that is not finite).
    """
    if decided <= 0 or not math.isfinite(p):
        return math.nan
    return math.sqrt(p * (1.0 - p) / decided)
