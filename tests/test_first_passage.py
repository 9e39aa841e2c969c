"""The first-passage engine (tokensde.theory.first_passage) on every coefficient object: one
quadrature of the scale density in src/tokensde, the spec's reference values, the variants
against their own closed forms, and the edges of the domain (exact inputs, each call < 1 s)."""

from __future__ import annotations

import ast
import math
import time
from pathlib import Path

import numpy as np
import pytest

import tokensde
from tokensde.model.checks import ParameterError
from tokensde.theory import coefficients as co
from tokensde.theory import decision_time as dt
from tokensde.theory import first_passage as fp
from tokensde.theory import mlp_block as mb
from tokensde.theory import redrawn_forms as rf
from tokensde.theory import two_tokens as tt

ROOT = Path(tokensde.__file__).resolve().parent
ENGINE = "theory/first_passage.py"
# calls that integrate a density: only the engine may use them on the scale density
QUADRATURES = {"quad", "cumulative_trapezoid", "cumtrapz", "chebint", "leggauss", "trapezoid",
               "simpson", "roots_jacobi"}
ALLOWED = {
    ENGINE: "the engine (and its independent reference, spec_reference)",
    "sim/gram.py": "Gauss-Legendre for the Gram sampler's radial law, not a scale density",
    "meanfield/quadrature.py": "Gauss-Legendre nodes on S^2 for the limit measure, not a scale density",
    "study/noise_threshold.py": "Gauss-Jacobi nodes for the limit's stationary density on the "
                                "sphere, not a scale density",
    "theory/token_noise.py": "the Gaussian expectation of a normalised noisy step (the layer "
                             "step's bias on the token-noise threshold), not a scale density",
}


def _calls(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in QUADRATURES:
                found.add(name)
    return found


def test_the_first_passage_quadrature_exists_once():
    where = {str(p.relative_to(ROOT)): _calls(p) for p in ROOT.rglob("*.py")}
    where = {k: v for k, v in where.items() if v}
    assert ENGINE in where
    assert set(where) <= set(ALLOWED), {k: v for k, v in where.items() if k not in ALLOWED}


def test_no_caller_branches_on_the_variant():
    for p in ROOT.rglob("*.py"):
        text = p.read_text()
        assert 'mlp != "none"' not in text, p
        assert "p_first_from" not in text or p.name == "mlp_block.py", p


@pytest.mark.parametrize(("args", "value"), [((1.0, 3, 0.0), 0.22242), ((2.0, 4, -0.5), 0.46624),
                                             ((1.5, 6, -0.5), 0.21707), ((2.5, 10, 0.0), 0.12202)])
def test_spec_reference_values(args, value):
    beta, d, rho0 = args
    got = fp.hitting_probability(co._SpecPair(beta, d), rho0)
    assert got == pytest.approx(value, abs=5e-6)
    assert got == pytest.approx(fp.spec_reference(beta, d, rho0), rel=1e-9)


def test_d_two_is_arccos_over_pi():
    for rho0 in (-0.9, -0.3, 0.0, 0.4, 0.95):
        assert fp.hitting_probability(co._SpecPair(0.7, 2.0), rho0) == pytest.approx(
            math.acos(rho0) / math.pi, rel=1e-10)


def test_generic_z_form_agrees_with_the_closed_slopes():
    """The default scale slope (from z coefficients) on RedrawnForms at s = 0 is the spec's."""
    for beta, d, rho0, tol in [(2.0, 4, -0.5, 1e-8), (1.0, 3, 0.2, 1e-3)]:
        want = fp.hitting_probability(co._SpecPair(beta, d), rho0, tol)
        got = fp.hitting_probability(co.RedrawnForms(beta, d, 0.0), rho0, tol)
        assert got == pytest.approx(want, rel=1e-6)


def test_limit_is_the_small_tol_end_of_the_tol_curve():
    m = co._SpecPair(2.5, 10)
    lim = fp.hitting_probability(m, "uniform")
    assert fp.hitting_probability(m, "uniform", 1e-250) == pytest.approx(lim, rel=1e-9)


def test_hybrid_limit_is_the_threshold():
    beta = 1.0
    eps_c = math.sqrt(tt.hybrid_eps2_c(beta))
    assert fp.hitting_probability(co._HybridPair(beta, 1.1 * eps_c), 0.3) == 1.0
    assert fp.hitting_probability(co._HybridPair(beta, 0.9 * eps_c), 0.3) == 0.0
    assert fp.hitting_probability(co._HybridPair(beta, 0.0), 0.3, 1e-6) == 0.0


def test_pair_model_picks_each_variant():
    assert isinstance(co.pair_model(1.0, 4), co._SpecPair)
    assert isinstance(co.pair_model(1.0, 4, mlp="relu", mlp_sigma=0.5), co._MLPPair)
    assert isinstance(co.pair_model(1.0, 4, mlp="relu", mlp_sigma=0.0), co._SpecPair)
    assert isinstance(co.pair_model(1.0, 4, qk_scale=0.5), co.RedrawnForms)
    assert isinstance(co.pair_model(1.0, 4, eps=0.3), co._HybridPair)


# ---------------------------------------------------------------------------------------------
# Edges of the domain (issue 24, class 5): exact inputs, values, each call under a second
# ---------------------------------------------------------------------------------------------

def _timed(f):
    t = time.perf_counter()
    out = f()
    assert time.perf_counter() - t < 1.0
    return out


BC_1E9 = float(tt.beta_c(1e9))


@pytest.mark.parametrize(("call", "value"), [
    (lambda: tt.p_anti(2.0, 4, -1.0), 1.0),
    (lambda: tt.p_anti(2.0, 4, 1.0), 0.0),
    (lambda: dt.p_anti_at_tol(2.0, 4, -1.0, 1e-8), 1.0),
    (lambda: dt.p_anti_at_tol(2.0, 4, 1.0, 1e-8), 0.0),
    (lambda: rf.p_first_forms(2.0, 4, -1.0, 1e-8, 1.0), 1.0),
    (lambda: rf.p_first_forms(2.0, 4, 1.0, 1e-8, 1.0), 0.0),
    (lambda: mb.p_first(2.0, 4, -1.0, 1e-8, 1.0, "relu", 1.0), 1.0),
    (lambda: mb.p_first_from(2.0, 4, 1.0, 1e-8, "relu", 1.0), 0.0),
    (lambda: mb.p_first_limit(2.0, 1e8, 0.0, "relu", 1.0), 0.0),
    (lambda: tt.p_anti(12.0, 1e300, 0.0), 0.0),  # subcritical at any d: 0 at once
    (lambda: tt.p_anti_uniform(12.0, 1e300), 0.0),
    (lambda: tt.p_anti(BC_1E9 + 1.0, 1e9, 0.5), 0.0),  # below the float range
    (lambda: tt.p_anti(1e300, 4, 0.0), 0.5),  # beta -> infinity
    (lambda: tt.hybrid_p_anti(1e3, 1.0), 1.0),
])
def test_edges_return_their_value_at_once(call, value):
    assert _timed(call) == pytest.approx(value, abs=1e-12)


def test_large_d_supercritical_is_computed_at_once():
    # two independent quadratures (this engine and the former endpoint grid) agreed to 6e-8 here
    got = _timed(lambda: tt.p_anti(tt.beta_c(1e8) + 1.0, 1e8, -0.5))
    assert got == pytest.approx(5.4875185e-4, rel=1e-6)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: tt.p_anti(20.0, 1e12, 0.0), "d"),
    (lambda: rf.p_first_forms(5.0, 4, 0.0, 1e-8, 100.0), "qk_scale"),
    (lambda: dt.decision_rate(2.0, 1e6, 1e-8), "d"),
    (lambda: dt.survival(np.array([0.0, 1.0]), 2.0, 1e5), "d"),
    (lambda: dt.survival(np.array([0.0, 1e6]), 1.5, 4), "times"),
    (lambda: dt.median_time(2.0, 1e4), "d"),
    (lambda: tt.p_anti(math.nan, 4, 0.0), "beta"),
    (lambda: tt.p_anti(2.0, 4, 1.5), "rho0"),
    (lambda: fp.hitting_probability(co._SpecPair(2.0, 4), 0.0, 1.5), "tol"),
])
def test_the_rest_is_refused_by_name(call, name):
    t = time.perf_counter()
    with pytest.raises(ParameterError, match=f"^{name} "):
        call()
    assert time.perf_counter() - t < 1.0
