"""The plan of a simulation: every choice `simulate` makes before any work, in one object.

`simulate.plan_run` resolves the arguments of `simulate` (the sampler, the attention evaluation
and its basis, the batch of runs the driver advances together, the checkpoints, the stopping
rule, the coupled runs of a step-error measurement) into a `RunPlan`; `simulate` runs that plan
and `RunPlan.budget` accounts for it (memory, work, layer steps), so that the estimate of a run
and the run itself read the same choices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..model.params import ModelParams, TimeGrid
from .batch import _mlp_width
from .budget import SAMPLER_STEPS, Budget, Memory, estimate_memory, estimate_work
from .coupled import _levels_of
from .rng import _RUN_BLOCK

__all__ = ["COUPLED_BATCH", "RunPlan"]

# runs advanced together by the coupled runs of a step-error measurement (`analysis.step_coupled`)
COUPLED_BATCH = 1024


@dataclass(frozen=True, eq=False)
class RunPlan:
    """What a simulation of `runs` systems will do: `sampler` ('fast', 'full', 'gram') with the
    attention `evaluator` ('dense', 'expansion' of `basis` functions), batches of `batch_size` runs
    (`driver.run_blocks`), records at `checkpoints` (and each observer's `observed_at`), the
    decision `(tol, every)` or None for the horizon, in `dtype`; `coupled` runs beside it at dt,
    2 dt (and 4 dt) measure the step error (`analysis.step_coupled`)."""

    params: ModelParams
    grid: TimeGrid
    runs: int
    scheme: str
    sampler: str
    evaluator: str
    basis: int  # basis functions of the O(n) attention (0: dense)
    batch_size: int
    checkpoints: np.ndarray
    observed_at: list[np.ndarray]  # the layers of each observer, built-in ones first
    record: tuple[str, ...]  # the built-in records kept ('gram', 'tokens')
    weights: np.ndarray | None
    decide: tuple[float, int] | None
    init_kind: str
    dtype: torch.dtype
    width: int  # numbers held per token: d, or n for the Gram sampler from a uniform start
    coupled: int = 0

    @property
    def blocks(self) -> int:
        """Batches of runs the driver advances one after another: ceil(runs / batch_size)."""
        return math.ceil(self.runs / self.batch_size)

    @property
    def full(self) -> bool:
        """The noise is a d x d matrix per run: the full sampler, or the fast one with n >= d
        (which draws V itself)."""
        return self.sampler == "full" or (self.sampler == "fast" and self.params.n >= self.params.d)

    def memory(self, runs: int | None = None, block: int | None = None) -> Memory:
        """Bytes of `runs` runs (default the plan's): the records kept and the layer workspace
        of `block` runs (default one `RUN_BLOCK` of the batch: a lower bound, as a batch holds
        whole blocks and fewer runs a smaller one) (`budget.estimate_memory`)."""
        p = self.params
        block = min(self.batch_size, _RUN_BLOCK) if block is None else block
        return estimate_memory(self.runs if runs is None else runs, p.n, self.width,
                               len(self.checkpoints), block=block, record=self.record,
                               heads=p.heads, full=self.full, mlp=_mlp_width(p, self.sampler),
                               itemsize=torch.finfo(self.dtype).bits // 8, basis=self.basis)

    def budget(self) -> Budget:
        """The memory and work of this plan (`sim.budget`).

        Memory (`memory`): the records kept, plus the layer workspace of one block of runs (a
        lower bound). Work (`budget.estimate_work`): runs x layers x heads x n x (w (n + w) + 25
        n), or n x (8 R (1 + w) + w^2) with the O(n) attention of R basis functions, w the width
        held (its work that of width min(w, d)); `layers x blocks` layer steps, SAMPLER_STEPS
        each. Coupled runs add 1.5 (two steps) or 1.75 (three) times their layers' work, dense
        in R^d, in batches of COUPLED_BATCH.
        """
        p, g, runs = self.params, self.grid, self.runs
        n, heads, k = p.n, p.heads, len(self.checkpoints)
        mlp = _mlp_width(p, self.sampler)
        mem = self.memory()
        one = self.memory(1, 0).kept
        detail = (f"{runs} run{'s' * (runs != 1)}, n = {n}, d = {p.d}, {heads} "
                  f"head{'s' * (heads > 1)}, {k} checkpoints, {g.steps} layers, sampler "
                  f"{self.sampler}, {str(self.dtype).removeprefix('torch.')}"
                  + (f", attention by expansion ({self.basis} basis functions)"
                     if self.basis else ""))
        lower = ("runs", "n", "d", *(("heads",) if heads > 1 else ()), "checkpoints")
        steps = g.steps * self.blocks * SAMPLER_STEPS.get("full" if self.full else self.sampler,
                                                          1.0)
        work = estimate_work(runs, g.steps, n, min(self.width, p.d), heads, mlp, self.basis)
        if self.coupled:
            three = _levels_of(g.steps) == 3
            per = 1.75 if three else 1.5
            extra = per * estimate_work(self.coupled, g.steps, n, p.d, heads,
                                        _mlp_width(p, "full"))
            detail += (f", plus {self.coupled} runs coupled at dt, 2 dt{' and 4 dt' * three} "
                       f"for the step error (+{100 * extra / work:.0f} % work)")
            work += extra
            steps += per * g.steps * math.ceil(self.coupled / COUPLED_BATCH)
        return Budget("this simulation", mem.total, one, runs, work, detail, lower,
                      bounded=self.decide is None, longer=("runs", "layers", "n", "d"),
                      steps=steps)
