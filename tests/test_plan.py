"""The plan a budget accounts for is the plan `simulate` runs (`sim.simulate.plan_run`): the
batches the driver is handed, the sampler and the attention evaluation that ran, the checkpoints,
and the budget's layer steps against the batches seen, watched through a spy on the driver."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tokensde.analysis.step_coupled import simulate_with_step_error
from tokensde.meanfield import flow
from tokensde.meanfield.absorption import table_budget
from tokensde.model.params import ModelParams, TimeGrid
from tokensde.sim.options import Execution, Recording, StepControl, StoppingRule
from tokensde.sim.simulate import plan_run, simulate, simulation_budget

SIM = importlib.import_module("tokensde.sim.simulate")

# (model, layers, runs, options, the sampler and evaluator expected, layer steps a layer and batch)
CASES = {
    "gram, two batches": (ModelParams(n=4, d=3), 3, 300,
                          {"recording": Recording(checkpoints=2, record=("gram",)),
                           "execution": Execution(sampler="gram", batch_size=256)}, "gram", "dense", 3.0),
    "fast, n < d, decided": (ModelParams(n=2, d=3), 4, 40,
                             {"execution": Execution(sampler="fast"),
                              "stopping": StoppingRule.decided()}, "fast", "dense", 3.0),
    "full, batch 300 -> two of 512": (ModelParams(n=8, d=3), 2, 600,
                                      {"execution": Execution(sampler="full", batch_size=300),
                                       "recording": Recording(checkpoints=[0, 1, 2])},
                                      "full", "dense", 1.0),
    "expansion": (ModelParams(n=200, d=2, beta=0.5), 2, 2,
                  {"execution": Execution(attention_eval="expansion")}, "full", "expansion", 1.0),
}


def _spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Record the batch `simulate` hands the driver and the size of each block it advances."""
    seen: dict[str, list[int]] = {"batch": [], "sizes": []}
    real = SIM.run_blocks

    def run_blocks(runs, batch, advance, **kw):
        seen["batch"].append(batch)

        def counted(block):
            seen["sizes"].append(block.size)
            return advance(block)
        return real(runs, batch, counted, **kw)

    monkeypatch.setattr(SIM, "run_blocks", run_blocks)
    return seen


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_budget_plans_what_simulate_runs(case, monkeypatch):
    p, layers, runs, kw, sampler, evaluator, per_step = CASES[case]
    grid = TimeGrid.make(layers=layers)
    plan = plan_run(p, grid, runs, **kw)
    seen = _spy(monkeypatch)
    res = simulate(p, grid, runs=runs, seed=3, **kw)
    assert seen["batch"] == [plan.batch_size]
    assert len(seen["sizes"]) == plan.blocks and sum(seen["sizes"]) == runs
    assert (res.sampler, res.extra["attention_eval"]) == (plan.sampler, plan.evaluator) == (
        sampler, evaluator)
    np.testing.assert_array_equal(res.checkpoints, plan.checkpoints)
    assert (plan.decide is None) == (res.decided_at is None)
    # the estimate's layer steps are those of the batches the driver advanced
    b = simulation_budget(p, grid, runs, **kw)
    assert b.steps == layers * len(seen["sizes"]) * per_step
    assert (b.memory, b.work) == (plan.budget().memory, plan.budget().work)
    assert ("expansion (" in b.detail) == (evaluator == "expansion") == (plan.basis > 0)


def test_the_step_error_plan_counts_the_coupled_runs_that_ran():
    p, grid, runs = ModelParams(n=3, d=3, beta=1.0), TimeGrid.make(layers=4), 20
    step = StepControl(coupled_runs=8)
    plan = plan_run(p, grid, runs, step=step)
    res = simulate_with_step_error(p, grid, runs=runs, seed=1, step=step)
    assert res.extra["step"]["coupled_runs"] == plan.coupled == 8
    plain = simulation_budget(p, grid, runs)
    both = simulation_budget(p, grid, runs, step=step)
    # three levels (4 layers: dt, 2 dt and 4 dt) of 8 coupled runs: 1.75 their layers, one batch
    assert both.steps - plain.steps == 1.75 * 4
    assert both.work > plain.work
    # a model that cannot be coupled plans none, as none run
    one = ModelParams(n=1, d=3)
    assert plan_run(one, grid, runs, step=step).coupled == 0
    assert simulate_with_step_error(one, grid, runs=2, seed=1, step=step).extra["step"][
        "coupled_runs"] == 0


def test_the_flow_plan_is_the_flow_run(monkeypatch):
    """`run_coupled`'s batches are its plan's (`flow.FlowPlan`), whose layer steps the table's
    budget counts: one per layer, system and batch."""
    seen: list[int] = []
    real = flow.run_blocks

    def run_blocks(runs, batch, advance, **kw):
        return real(runs, batch, lambda block: (seen.append(block.size), advance(block))[1], **kw)

    monkeypatch.setattr(flow, "run_blocks", run_blocks)
    p, grid, runs = ModelParams(n=2, d=3, beta=1.0), TimeGrid.make(T=0.04, dt=0.02), 5
    how = Execution(batch_size=2)
    rng = np.random.default_rng(0)
    systems = [(f"n{k}", rng.standard_normal((k, 3)), None) for k in (4, 6)]
    flow.run_coupled(p, grid, systems, runs=runs, stopping=StoppingRule(), execution=how)
    plan = flow.FlowPlan.of(p, grid, [4, 6], runs, how)
    assert seen == [2, 2, 1] and plan.blocks == 3 and plan.evaluators == ("dense", "dense")
    assert plan.budget().steps == grid.steps * 2 * 3
    b = table_budget([3], [1.0], [4, 6], 8, ["iid"], runs, T=0.04, with_limit=False,
                     execution=how)
    assert b.steps == plan.budget().steps and b.work == plan.budget().work
