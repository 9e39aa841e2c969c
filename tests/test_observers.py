"""Observers (`simulate(observe=...)`): statistics kept at every checkpoint, run by run.

The records 'gram' and 'tokens' are the built-in observers, so an observer computing the same
thing gives the same bits; a user statistic agrees with the one computed from the recorded Gram
matrices; the outputs depend on neither the batch size nor early stopping (a decided run keeps
its statistic at decision); bad observers are refused naming `observe`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokensde import (
    Execution,
    ModelParams,
    Observer,
    ParameterError,
    Recording,
    StoppingRule,
    TimeGrid,
    simulate,
)
from tokensde.sim.layers import normalize
from tokensde.sim.observe import _RECORDS, _builtin_observers


def mean_cosine(x: torch.Tensor) -> torch.Tensor:
    """`(|sum_i x_i|^2 - n) / (n (n - 1))`, the mean of `<x_i, x_j>` over pairs `i != j` of unit
    tokens, `(runs,)`."""
    n = x.shape[-2]
    s = x.sum(-2)
    return ((s * s).sum(-1) - n) / (n * (n - 1))


def mean_cosine_of_gram(g: np.ndarray) -> np.ndarray:
    """The same from Gram matrices `(..., n, n)` with unit diagonal."""
    n = g.shape[-1]
    return (g.sum((-1, -2)) - n) / (n * (n - 1))


def gram_of(x: torch.Tensor) -> torch.Tensor:
    return x @ x.transpose(-1, -2)


def gram_of_directions(x: torch.Tensor) -> torch.Tensor:
    u = normalize(x)
    return u @ u.transpose(-1, -2)


CASES = [  # (params, sampler)
    (dict(n=4, d=6, beta=1.0), "full"),
    (dict(n=3, d=8, beta=1.5), "fast"),
    (dict(n=3, d=16, beta=2.0), "gram"),
    (dict(n=4, d=6, beta=1.0, norm="pre"), "full"),
]


@pytest.mark.parametrize(("params", "sampler"), CASES)
def test_builtin_records_are_observers_bit_for_bit(params, sampler):
    p = ModelParams(**params)
    grid, ex = TimeGrid.make(layers=12), Execution(sampler=sampler)
    # the Gram sampler holds no coordinates: there the records and observers are Gram-level
    coords = sampler != "gram"
    record = ("gram", "tokens") if coords else ("gram",)
    gram = gram_of if p.norm == "post" else gram_of_directions
    seen = [Observer("g", gram, invariant=True), *([Observer("t", lambda x: x)] if coords else [])]

    def run(record: tuple[str, ...], observe: list[Observer] | tuple = ()):
        return simulate(p, grid, runs=40, seed=7, execution=ex,
                        recording=Recording(checkpoints=4, record=record, observe=observe))

    plain, both, only = run(record), run(record, seen), run((), seen)
    for r in (both, only):
        np.testing.assert_array_equal(r.observed["g"], plain.gram)
        if coords:
            np.testing.assert_array_equal(r.observed["t"], plain.tokens)
        np.testing.assert_array_equal(r.state, plain.state)  # observing changes no number
        assert r.observed["g"].dtype == plain.gram.dtype == np.float64
    np.testing.assert_array_equal(both.gram, plain.gram)
    if coords:
        np.testing.assert_array_equal(both.tokens, plain.tokens)
    assert only.gram is None and only.tokens is None
    assert plain.observed == {}
    assert list(both.observed) == ["g", "t"][:len(seen)]  # the built-ins keep their own fields


def test_builtin_observers_follow_the_record_and_the_norm():
    assert [o.name for o in _builtin_observers(("tokens", "gram"), "post")] == list(_RECORDS)
    assert _builtin_observers((), "post") == ()
    x = torch.randn(5, 3, 4, dtype=torch.float64) * 3.0
    post, = _builtin_observers(("gram",), "post")
    pre, = _builtin_observers(("gram",), "pre")
    torch.testing.assert_close(post.fn(x), gram_of(x), rtol=0, atol=0)
    torch.testing.assert_close(pre.fn(x), gram_of_directions(x), rtol=0, atol=0)
    assert not torch.allclose(post.fn(x), pre.fn(x))  # the directions, not the stream


@pytest.mark.parametrize("sampler", ["full", "gram"])
def test_mean_cosine_at_every_layer_matches_the_gram_matrices(sampler):
    p = ModelParams(n=6, d=24, beta=1.0)
    layers = 25
    r = simulate(p, TimeGrid.make(layers=layers), runs=50, seed=2,
                 recording=Recording(checkpoints=range(layers + 1), record=("gram",),
                                     observe=[Observer("cos", mean_cosine, invariant=True)]),
                 execution=Execution(sampler=sampler))
    assert r.sampler == sampler
    assert r.observed["cos"].shape == (50, layers + 1)
    np.testing.assert_array_equal(r.checkpoints, np.arange(layers + 1))
    np.testing.assert_allclose(r.observed["cos"], mean_cosine_of_gram(r.gram), rtol=0, atol=1e-12)
    cos = r.observed["cos"]
    assert np.ptp(cos[:, 0]) > 0.1  # the runs differ: a statistic per run, and per layer:
    assert cos[:, -1].mean() > cos[:, 0].mean() + 0.3  # the tokens cluster


def test_observed_outputs_do_not_depend_on_the_batch_size():
    p = ModelParams(n=4, d=5, beta=1.0)
    obs = [Observer("cos", mean_cosine), Observer("norms", lambda x: x.norm(dim=-1))]
    rec = Recording(checkpoints=range(11), record=(), observe=obs)

    def run(bs: int):
        return simulate(p, TimeGrid.make(layers=10), runs=600, seed=11, recording=rec,
                        execution=Execution(batch_size=bs))

    whole = run(600)
    for bs in (256, 512):
        part = run(bs)
        for name in ("cos", "norms"):
            np.testing.assert_array_equal(part.observed[name], whole.observed[name])
    assert whole.observed["norms"].shape == (600, 11, 4)


@pytest.mark.parametrize("sampler", ["full", "gram"])
def test_a_decided_run_keeps_its_statistic_at_decision(sampler):
    p = ModelParams(n=3, d=12, beta=1.0)
    layers = 400
    kw = dict(runs=300, seed=4, execution=Execution(sampler=sampler, batch_size=256),
              recording=Recording(checkpoints=41,
                                  observe=[Observer("cos", mean_cosine, invariant=True)]))
    r = simulate(p, TimeGrid.make(layers=layers), stopping=StoppingRule.decided(1e-3), **kw)
    full = simulate(p, TimeGrid.make(layers=layers), **kw)  # the same runs to the horizon
    at = r.decided_at
    ck = r.checkpoints
    later = ck[None, :] > at[:, None]
    decided = at >= 0
    assert decided.sum() > 30 and (later & decided[:, None]).any(axis=1).sum() > 30
    # after its decision a run keeps its statistic at decision (that of its final state)
    final = mean_cosine(torch.from_numpy(r.state)).numpy()
    cos = r.observed["cos"]
    for i in np.flatnonzero(decided):
        np.testing.assert_array_equal(cos[i, later[i]], np.full(later[i].sum(), final[i]))
    # up to it, the numbers of the run to the horizon
    before = ~later | ~decided[:, None]
    np.testing.assert_array_equal(cos[before], full.observed["cos"][before])
    # a statistic of a decided state: every pair within tol of +-1
    assert np.all(np.abs(final[decided]) > 1 / 3 - 1e-2)
    assert not np.array_equal(cos, full.observed["cos"])  # stopping did change later records


def _fail(observe, match):
    with pytest.raises(ParameterError, match=match) as info:
        simulate(ModelParams(n=3, d=4, beta=1.0), TimeGrid.make(layers=3), runs=5,
                 recording=Recording(observe=observe))
    assert "observe" in str(info.value)


def test_invalid_observers_are_refused_naming_observe():
    ok = Observer("ok", mean_cosine)
    with pytest.raises(ParameterError, match=r"observe.*callable"):
        Observer("cos", 3.0)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match=r"observe.*non-empty string"):
        Observer("", mean_cosine)
    _fail({"cos": "mean"}, "callable")
    _fail([ok, Observer("ok", mean_cosine)], "'ok' is given twice")
    _fail([Observer("gram", gram_of)], "built-in record")
    _fail([mean_cosine], "Observer")
    _fail("cos", "must be None, an Observer")
    _fail([Observer("first", lambda x: x[:1])], r"one row per run, \(5, \.\.\.\).*shape \(1, 3, 4\)")
    _fail([Observer("sum", lambda x: x.sum())], r"one row per run.*shape \(\)")
    _fail([Observer("np", lambda x: x.numpy())], "ndarray")


def test_an_observer_whose_shape_changes_is_refused():
    calls = []

    def shifty(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x[:, : len(calls)].sum(-1)

    _fail([Observer("shifty", shifty)], "must not change")


def test_one_observer_alone():
    r = simulate(ModelParams(n=3, d=4, beta=1.0), TimeGrid.make(layers=3), runs=5,
                 recording=Recording(observe=Observer("cos", mean_cosine)))
    assert r.observed["cos"].shape == (5, 2)
    np.testing.assert_allclose(r.observed["cos"], mean_cosine_of_gram(r.gram), atol=1e-12)


def test_observed_outputs_are_saved_and_loaded(tmp_path):
    from tokensde import load_result, save_result

    r = simulate(ModelParams(n=3, d=4, beta=1.0), TimeGrid.make(layers=4), runs=6,
                 recording=Recording(checkpoints=range(5), observe={"cos": mean_cosine,
                                                                    "norms": lambda x: x.norm(dim=-1)}))
    back = load_result(save_result(r, tmp_path / "r.npz"))
    assert list(back.observed) == ["cos", "norms"]
    for name, a in r.observed.items():
        np.testing.assert_array_equal(back.observed[name], a)
    np.testing.assert_array_equal(back.gram, r.gram)


def test_an_observer_with_its_own_checkpoints_is_saved_and_loaded(tmp_path):
    from tokensde import load_result, save_result

    rec = Recording(checkpoints=3, observe=[Observer("cos", mean_cosine, checkpoints=(0, 1, 2, 4))])
    r = simulate(ModelParams(n=3, d=4, beta=1.0), TimeGrid.make(layers=4), runs=6, recording=rec)
    back = load_result(save_result(r, tmp_path / "r.npz"))
    assert back.observed["cos"].shape == (6, 4)
    np.testing.assert_array_equal(back.observed["cos"], r.observed["cos"])
    np.testing.assert_array_equal(back.observed_layers("cos"), [0, 1, 2, 4])
    np.testing.assert_array_equal(back.checkpoints, r.checkpoints)


def test_a_damaged_observed_array_is_refused(tmp_path):
    from tokensde import load_result, save_result
    from tokensde.io.store import StoreError

    r = simulate(ModelParams(n=3, d=4, beta=1.0), TimeGrid.make(layers=4), runs=6,
                 recording=Recording(checkpoints=3, observe={"cos": mean_cosine}))
    path = save_result(r, tmp_path / "r.npz")
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    data["observed/cos"] = data["observed/cos"][:5]  # one run short
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(StoreError, match=r"'observed/cos' has shape \(5, 3\)"):
        load_result(tmp_path / "bad.npz")


class Visits(Observer):
    """The layer and the depth time of each call, one row per run, and the layers called."""

    def observe(self, layer: int, t: float, x: torch.Tensor) -> torch.Tensor:
        CALLS.setdefault(self.name, []).append(layer)
        b = x.shape[0]
        return torch.tensor([float(layer), t], dtype=torch.float64).expand(b, 2).clone()


CALLS: dict[str, list[int]] = {}


@pytest.mark.parametrize("sampler", ["full", "gram"])
def test_an_observer_is_called_at_its_own_checkpoints_with_the_layer_and_the_time(sampler):
    CALLS.clear()
    p = ModelParams(n=3, d=5, beta=1.0)
    grid = TimeGrid.make(T=1.3, dt=0.1)  # 13 layers; dt not a power of two
    own = (0, 3, 7, 13)
    rec = Recording(checkpoints=3, record=("gram",),
                    observe=[Visits("own", checkpoints=own, invariant=True),
                             Visits("shared", invariant=True),
                             Visits("evenly", checkpoints=5, invariant=True)])
    r = simulate(p, grid, runs=5, seed=3, recording=rec, execution=Execution(sampler=sampler))
    evenly = np.unique(np.round(np.linspace(0, 13, 5)).astype(int))
    # called at exactly its layers, once each (one batch), in order; the invariance check of
    # an invariant observer is two more calls (the state, and the state rotated) at its first
    assert CALLS["own"] == [0, 0, *own]
    assert CALLS["shared"] == [0, 0, *r.checkpoints.tolist()]
    assert CALLS["evenly"] == [0, 0, *evenly.tolist()]
    for name, layers in (("own", np.array(own)), ("shared", r.checkpoints), ("evenly", evenly)):
        np.testing.assert_array_equal(r.observed_layers(name), layers)
        got = r.observed[name]
        assert got.shape == (5, len(layers), 2)
        np.testing.assert_array_equal(got[..., 0], np.broadcast_to(layers, (5, len(layers))))
        np.testing.assert_array_equal(got[..., 1], np.broadcast_to(layers * grid.dt,
                                                                   (5, len(layers))))
    assert r.observed["evenly"][0, 1, 1] == 3 * 0.1  # t = layer * dt, as a float product
    assert r.extra["observed_at"] == {"own": list(own), "evenly": evenly.tolist()}


def test_own_checkpoints_see_the_recorded_tokens_bit_for_bit():
    p = ModelParams(n=4, d=6, beta=1.5)
    grid = TimeGrid.make(layers=20)
    own = (2, 5, 11, 20)
    ref = simulate(p, grid, runs=30, seed=5,
                   recording=Recording(checkpoints=own, record=("tokens",)))
    r = simulate(p, grid, runs=30, seed=5,
                 recording=Recording(record=(), observe=[Observer("x", lambda x: x.clone(),
                                                                  checkpoints=own)]))
    np.testing.assert_array_equal(r.observed["x"], ref.tokens)
    np.testing.assert_array_equal(r.state, ref.state)
    assert not np.array_equal(ref.tokens[:, 0], ref.tokens[:, -1])  # the tokens moved


def test_a_decided_run_is_not_observed_after_its_decision():
    CALLS.clear()
    p = ModelParams(n=3, d=12, beta=1.0)
    grid = TimeGrid.make(layers=300)
    own = np.arange(0, 301, 10)
    r = simulate(p, grid, runs=60, seed=4, stopping=StoppingRule.decided(1e-3),
                 recording=Recording(record=(), observe=[Visits("v", checkpoints=own)]))
    at = r.decided_at
    decided = at >= 0
    assert 10 < decided.sum() < 60  # some runs decided, some not
    seen = r.observed["v"][..., 0]  # the layer of the call that filled each checkpoint
    later = own[None, :] > at[:, None]
    for i in range(60):
        want = np.where(decided[i] & later[i], at[i], own)  # after it: the call at decision
        np.testing.assert_array_equal(seen[i], want)
    np.testing.assert_array_equal(r.observed["v"][..., 1], seen * grid.dt)
    # no call at a layer it did not name but a decision layer
    assert set(CALLS["v"]) <= set(own.tolist()) | set(at[decided].tolist())
    assert set(CALLS["v"]) - set(own.tolist())  # and some at a decision layer off its list


def test_bad_own_checkpoints_are_refused_naming_the_observer():
    with pytest.raises(ParameterError, match=r"observer 'late'.*\[0, 3\]"):
        simulate(ModelParams(n=3, d=4, beta=1.0), TimeGrid.make(layers=3), runs=2,
                 recording=Recording(observe=[Observer("late", mean_cosine, checkpoints=[4])]))
    with pytest.raises(ParameterError, match="observer 'odd' takes checkpoints"):
        Observer("odd", mean_cosine, checkpoints="end")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="overrides observe"):
        Observer("none")
