"""A test shorthand: `simulate` with each option object's fields given as loose keywords.

Many tests share one dictionary of keywords between several runs that differ in one field (the
sampler, the evaluator, the scheme). `simulate_loose(p, **kw)` groups those keywords into the
library's option objects, so that each test still runs the one public spelling.
"""

from __future__ import annotations

from typing import Any

from tokensde import Execution, InitialState, ModelParams, Recording, StoppingRule, TimeGrid
from tokensde import simulate as _simulate

GROUPS = {
    "grid": ("layers", "alpha", "T", "dt"),
    "initial": ("init", "rho0", "weights"),
    "stopping": ("until", "tol", "decide_every"),
    "recording": ("checkpoints", "record", "observe"),
    "execution": ("sampler", "attention_eval", "device", "dtype", "batch_size"),
}
MAKERS = {"initial": InitialState, "stopping": StoppingRule, "recording": Recording,
          "execution": Execution}


def options(**kw: Any) -> dict[str, Any]:
    """The keywords of `simulate` (grid included) from loose fields; the others pass through."""
    out: dict[str, Any] = {}
    for group, fields in GROUPS.items():
        given = {k: kw.pop(k) for k in fields if k in kw}
        if group == "grid":
            if given:
                out["grid"] = TimeGrid.make(**given)
        elif given:
            out[group] = MAKERS[group](**given)
    return {**out, **kw}


def simulate_loose(p: ModelParams, **kw: Any) -> Any:
    """`simulate(p, grid, **objects)` from loose keywords (see `options`)."""
    opts = options(**kw)
    return _simulate(p, opts.pop("grid"), **opts)
