"""The curated public API: the root names, each layer's `__all__`, value equality of
`ModelParams`, numpy results with tidy exports, and the option objects of `simulate`."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokensde
from tokensde import (
    Execution,
    InitialState,
    ModelParams,
    ParameterError,
    Recording,
    SimResult,
    StoppingRule,
    TimeGrid,
    load_result,
    save_result,
    simulate,
)
from tokensde._lazy import exported_imports

LAYERS = ("model", "theory", "sim", "io", "analysis", "sweep", "plots", "vit", "real", "meanfield",
          "study", "cli")


def _package(name: str):
    return importlib.import_module(f"tokensde.{name}" if name else "tokensde")


def _resolve(pkg, name: str):
    """A name of `pkg.__all__`: an attribute, or a submodule not imported yet."""
    try:
        return getattr(pkg, name)
    except AttributeError:
        return importlib.import_module(f"{pkg.__name__}.{name}")


# --- the names ---------------------------------------------------------------------------------

def test_root_is_about_fifteen_names_and_each_resolves():
    names = [n for n in tokensde.__all__ if n != "__version__"]
    assert 12 <= len(names) <= 21, names
    for n in names:
        assert _resolve(tokensde, n) is not None, n
    assert tokensde.simulate is importlib.import_module("tokensde.sim.simulate").simulate
    assert tokensde.theory is importlib.import_module("tokensde.theory")
    assert set(tokensde.__all__) <= set(dir(tokensde))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = tokensde.nope


@pytest.mark.parametrize("layer", LAYERS)
def test_every_layer_lists_what_it_offers(layer):
    pkg = _package(layer)
    assert pkg.__all__, layer
    for n in pkg.__all__:
        assert _resolve(pkg, n) is not None, f"tokensde.{layer}.{n}"


@pytest.mark.parametrize("layer", ["", "analysis", "io", "sweep", "meanfield"])
def test_lazy_exports_are_their_type_checking_imports(layer):
    # the block under `if TYPE_CHECKING:` is the one list of what is loaded on use
    pkg = _package(layer)
    lazy = set(exported_imports(pkg.__file__))
    eager = {n for n in pkg.__all__ if n in vars(pkg) and n not in lazy}
    assert lazy | eager == set(pkg.__all__)
    # a lazy name equal to a submodule's would be shadowed once the submodule is imported
    subs = {m.name for m in pkgutil.iter_modules([str(Path(pkg.__file__).parent)])}
    assert not (lazy - {"theory"}) & subs


@pytest.mark.slow  # fresh interpreters: about 3 s of CPU
def test_import_stays_torch_free_until_the_simulator_is_asked_for():
    code = ("import sys, tokensde, tokensde.analysis.stats; "
            "from tokensde import theory, ModelParams, VALUE_INIT_PRESETS; "
            "theory.beta_c(10); tokensde.analysis.stats.wilson(1, 2); "
            "a = 'torch' in sys.modules; tokensde.simulate; print(a, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_theory_namespace_gives_the_two_token_results():
    th = tokensde.theory
    assert th.beta_c(3) == 0.0 and abs(th.beta_c(10) - np.arccosh(8) / 2) < 1e-15
    assert abs(float(th.p_anti(1.0, 3, 0.0)) - 0.22242256) < 1e-8  # README's CLI example
    assert th.lyapunov_antipodal(th.beta_c(10), 10) == pytest.approx(0.0, abs=1e-12)


# --- ModelParams compares by value ---------------------------------------------------------------

def test_model_params_compare_and_hash_by_value():
    p = ModelParams(n=3, d=4, beta=2.0)
    assert p == p.with_() and hash(p) == hash(p.with_())
    assert p != p.with_(beta=2.5) and p != p.with_(noise="scalar")
    assert p != "ModelParams(n=3, d=4)" and (p == object()) is False
    q = np.arange(16.0).reshape(4, 4)
    a, b = ModelParams(d=4, Q=q), ModelParams(d=4, Q=q.copy())
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != ModelParams(d=4, Q=q + 1e-12) and a != ModelParams(d=4)  # Q given != Q None
    zero = np.zeros((4, 4))
    assert ModelParams(d=4, mean=zero) == ModelParams(d=4, mean=-zero)  # -0.0 == 0.0
    assert hash(ModelParams(d=4, mean=zero)) == hash(ModelParams(d=4, mean=-zero))
    assert ModelParams(d=4, mean=zero) != ModelParams(d=4, mean="none")
    cache = {p: "seen"}
    assert cache[ModelParams(n=3, d=4, beta=2.0)] == "seen"
    assert len({p, p.with_(), ModelParams.from_dict(p.to_dict())}) == 1


# --- SimResult: numpy, tidy ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair_result() -> SimResult:
    return simulate(ModelParams(n=3, d=4, beta=2.0), TimeGrid.make(layers=10), runs=5, seed=1,
                    recording=Recording(checkpoints=[0, 4, 10], record=("gram", "tokens")))


def test_result_arrays_are_numpy(pair_result, tmp_path):
    r = pair_result
    for a in (r.x, r.gram, r.tokens, r.rho(), r.final_gram(), r.times, r.checkpoints):
        assert isinstance(a, np.ndarray)
    assert r.gram.shape == (5, 3, 3, 3) and r.x.shape == (5, 3, 4) and r.rho(0, 2).shape == (5, 3)
    np.testing.assert_array_equal(r.final_gram(), r.gram[:, -1])  # bit for bit, as recorded
    back = load_result(save_result(r, tmp_path / "r.npz"))
    assert isinstance(back.gram, np.ndarray) and isinstance(back.x, np.ndarray)
    np.testing.assert_array_equal(back.gram, r.gram)
    f32 = simulate(ModelParams(n=2, d=3), TimeGrid.make(layers=2), runs=3,
                   execution=Execution(dtype="float32"))
    assert f32.gram.dtype == np.float32 and f32.x.dtype == np.float32


def test_to_pandas_is_tidy(pair_result):
    r = pair_result
    df = r.to_pandas()
    assert list(df.columns) == ["run", "layer", "t", "i", "j", "value"]
    assert len(df) == 5 * 3 * 3  # runs x checkpoints x pairs i < j
    assert (df.i < df.j).all() and set(df.layer) == {0, 4, 10}
    np.testing.assert_allclose(df.t, df.layer * 0.1)  # dt = 1/layers
    for row in df.sample(10, random_state=0).itertuples():
        k = list(r.checkpoints).index(row.layer)
        assert row.value == r.gram[row.run, k, row.i, row.j]
    full = r.to_pandas(pairs=False)
    assert len(full) == 5 * 3 * 9
    np.testing.assert_allclose(full[full.i == full.j].value, 1.0, atol=1e-12)
    wide = df.pivot_table(index=["run", "layer"], columns=["i", "j"], values="value")
    np.testing.assert_array_equal(wide[(0, 1)].to_numpy().reshape(5, 3), r.rho(0, 1))


def test_two_token_pair_starts_at_rho0_in_the_table():
    res = simulate(ModelParams(n=2, d=4), TimeGrid.make(layers=4), runs=3, seed=0,
                   initial=InitialState.pair(-0.25))
    df = res.to_pandas()
    np.testing.assert_allclose(df[df.layer == 0].value, -0.25, atol=1e-15)
    assert len(df) == 3 * 2


def test_without_gram_the_exports_say_so():
    res = simulate(ModelParams(n=2, d=3), TimeGrid.make(layers=2), runs=2,
                   recording=Recording(record=("tokens",)))
    with pytest.raises(ValueError, match="did not record 'gram'"):
        res.to_pandas()


def test_to_xarray_needs_xarray(pair_result, monkeypatch):
    monkeypatch.setitem(sys.modules, "xarray", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install xarray"):
        pair_result.to_xarray()


def test_to_xarray_when_installed(pair_result):
    pytest.importorskip("xarray")
    da = pair_result.to_xarray()
    assert da.dims == ("run", "layer", "i", "j") and da.name == "gram"
    np.testing.assert_array_equal(da.values, pair_result.gram)
    np.testing.assert_allclose(da.t.values, [0.0, 0.4, 1.0])


# --- option objects of simulate ------------------------------------------------------------------

def test_simulate_takes_each_option_once():
    """The facade: the model, the grid, four option objects and three scalars; no loose
    keyword of an option object."""
    names = list(inspect.signature(simulate).parameters)
    assert names == ["params", "grid", "runs", "seed", "scheme", "initial", "stopping",
                     "recording", "execution", "progress"]
    p = ModelParams(n=2, d=4)
    for loose in ({"init": "pair"}, {"until": "decided"}, {"checkpoints": 3}, {"sampler": "full"},
                  {"layers": 3}):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            simulate(p, TimeGrid.make(layers=2), **loose)


def test_grouped_options_give_the_numbers_of_the_defaults():
    p = ModelParams(n=2, d=4, beta=2.0)
    grid = TimeGrid.make(T=4.0, dt=0.05)
    plain = simulate(p, grid, runs=50, seed=3)
    spelled = simulate(p, grid, runs=50, seed=3, initial=InitialState.uniform(),
                       stopping=StoppingRule(), recording=Recording(),
                       execution=Execution(batch_size=16))
    np.testing.assert_array_equal(plain.gram, spelled.gram)
    assert plain.metadata() | {"wall_s": 0} == spelled.metadata() | {"wall_s": 0}


def test_option_objects_check_their_values_when_made():
    with pytest.raises(ParameterError, match="init='pair' needs rho0"):
        InitialState("pair")
    with pytest.raises(ParameterError, match=r"rho0 must be a finite number in \[-1, 1\]"):
        InitialState.pair(1.5)
    with pytest.raises(ParameterError, match="rho0 is only used with init='pair'"):
        InitialState("uniform", 0.3)
    with pytest.raises(ParameterError, match="init must be 'uniform', 'pair' or an array"):
        InitialState("gaussian")
    with pytest.raises(ParameterError, match="only used with until='decided'"):
        StoppingRule("horizon", tol=1e-3)
    with pytest.raises(ParameterError, match="until must be one of horizon, decided"):
        StoppingRule("never")
    with pytest.raises(ParameterError, match=r"tol must be a number in \[1e-12, 0.5\]"):
        StoppingRule.decided(tol=2.0)
    with pytest.raises(ParameterError, match="decide_every must be an integer >= 1"):
        StoppingRule.decided(decide_every=0)
    with pytest.raises(ParameterError, match="record must be a subset of"):
        Recording(record=("gram", "rho"))
    with pytest.raises(ParameterError, match="write \\('gram',\\)"):
        Recording(record="gram")
    assert Recording(checkpoints=[0, 5]).checkpoints == (0, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        StoppingRule().until = "decided"  # type: ignore[misc]


def test_options_of_the_wrong_type_are_refused_by_name():
    p = ModelParams(n=2, d=4)
    with pytest.raises(TypeError, match=r"stopping must be a StoppingRule \(e.g. StoppingRule"):
        simulate(p, TimeGrid.make(layers=2), stopping="decided")
    with pytest.raises(TypeError, match=r"grid must be a TimeGrid: TimeGrid\.make"):
        simulate(p, 10)
    res = simulate(p, TimeGrid.make(layers=2), runs=2, stopping=StoppingRule.decided(1e-3))
    assert res.decided_at is not None
    # the run's dtype still bounds tol (float32 resolves gaps only to ~1e-7)
    with pytest.raises(ParameterError, match="float32 Gram entries"):
        simulate(p, TimeGrid.make(layers=2), stopping=StoppingRule.decided(1e-9),
                 execution=Execution(dtype="float32"))
