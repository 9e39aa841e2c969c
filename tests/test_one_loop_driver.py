"""The one batch driver (`sim.driver.run_blocks`): its batches, their streams and recorders, and
the account of runs decided early."""

from __future__ import annotations

import numpy as np
import torch

from tokensde import ModelParams, TimeGrid
from tokensde.sim.driver import Block, Decision, run_blocks
from tokensde.sim.observe import Observer, _Observations
from tokensde.sim.options import Execution, InitialState, StoppingRule
from tokensde.sim.rng import _RUN_BLOCK, RunStreams
from tokensde.sim.simulate import simulate


def test_batches_streams_and_recorder_rows():
    runs, first = 2 * _RUN_BLOCK + 88, _RUN_BLOCK
    book = _Observations([Observer("i", lambda x: x[:, 0])], runs - first, [np.array([0])], 1.0)
    seen = []

    def advance(b: Block) -> tuple[int, int]:
        draw = b.streams.normal(2)
        assert torch.equal(draw, RunStreams(7, runs, b.start, b.stop).normal(2))
        assert b.streams.runs == b.size and b.decision is None
        b.recorder.at(0, torch.arange(b.start, b.stop, dtype=torch.float64)[:, None],
                      torch.arange(b.size))
        seen.append(draw)
        return b.start, b.stop

    got = run_blocks(runs, _RUN_BLOCK, advance, seed=7, first=first, book=book)
    assert got == [(_RUN_BLOCK, 2 * _RUN_BLOCK), (2 * _RUN_BLOCK, runs)]
    # row r of the observations is run first + r
    assert np.array_equal(book.arrays()["i"][:, 0], np.arange(first, runs))
    assert not torch.equal(seen[0][:88], seen[1])  # each block its own stream


def test_decided_runs_are_accounted_once():
    # every run-layer is advanced or accounted as not needed: runs x layers in all, with the
    # layer of decision of each run a multiple of decide_every (or the last)
    p = ModelParams(n=2, d=3, beta=4.0)
    layers, runs, done = 40, 300, []
    r = simulate(p, TimeGrid.make(T=8.0, dt=0.2), runs=runs, seed=3,
                 initial=InitialState.pair(0.2),
                 stopping=StoppingRule.decided(tol=1e-3, decide_every=4),
                 execution=Execution(batch_size=_RUN_BLOCK), progress=done.append)
    assert sum(done) == runs * layers
    at = r.decided_at
    assert ((at >= 0) & (at < layers)).sum() > runs // 2  # most stop early
    assert np.all((at == -1) | (at % 4 == 0) | (at == layers))


def test_a_block_takes_a_decision_or_a_rule_of_its_own():
    d = Decision(1e-3, 4, directions=True)
    b = Block(0, 5, RunStreams(0, 5), None, d)
    dropped = []
    rule = b.stopping(dropped.append)
    assert b.stop_test is rule and rule.every == 4 and rule.directions and len(rule.decided_at) == 5
    rule.retain(torch.tensor([True, False, True, True, True]))
    assert len(dropped) == 1
    assert Block(0, 5, RunStreams(0, 5), None, None).stopping() is None
