"""The many-token limit (issue 23): quadrature orders, weighted nodes, merging, the coupled flow,
and particles against the limit on one noise path (docs/meanfield.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special

from tokensde.meanfield.absorption import absorption_table
from tokensde.meanfield.flow import merge_nodes, run_coupled
from tokensde.meanfield.quadrature import (
    _density_weights,
    _gauss_sphere_rule,
    _qmc_rule,
    _vmf_density,
    circle_rule,
    sample_initial,
    sphere_rule,
)
from tokensde.meanfield.statistics import _arc_counts, _field_at, arc_masses, minority_mass
from tokensde.model.params import ModelParams, ParameterError, TimeGrid
from tokensde.sim import Execution, StoppingRule


@pytest.fixture(autouse=True)
def one_thread():
    """Tensors here are small: one torch thread (restored after each test)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("kappa", [1.0, 3.0])
def test_circle_rule_spectral_order(kappa: float) -> None:
    """Trapezoid rule for (1/2pi) ∫ exp(kappa cos a) da = I_0(kappa): the error is
    2 I_K(kappa) + ... (aliasing of the K-th Fourier mode), i.e. spectral, not algebraic."""
    exact = special.iv(0, kappa)
    for K in (4, 8, 12, 16):
        x, w = circle_rule(K)
        err = abs(float(w @ np.exp(kappa * x[:, 0])) - exact)
        want = 2 * special.iv(K, kappa)  # leading aliasing term, exact up to higher modes
        assert err == pytest.approx(want, rel=1e-2, abs=1e-15)
    # exact for trigonometric polynomials of degree < K: cos^6 has degree 6
    x, w = circle_rule(7)
    assert float(w @ x[:, 0] ** 6) == pytest.approx(5 / 16, abs=1e-15)


def test_gauss_sphere_degree() -> None:
    """`2 m^2` nodes integrate degree <= 2m - 1 exactly: E[x^2 y^2 z^2] = 1/105 (degree 6) is exact
    with m = 4 and not with m = 3; E[z^4] = 1/5 with m = 3."""
    x, w = _gauss_sphere_rule(4)
    assert len(w) == 32 and float(w.sum()) == pytest.approx(1.0, abs=1e-15)
    assert float(w @ (x[:, 0] * x[:, 1] * x[:, 2]) ** 2) == pytest.approx(1 / 105, abs=1e-15)
    x3, w3 = _gauss_sphere_rule(3)
    assert abs(float(w3 @ (x3[:, 0] * x3[:, 1] * x3[:, 2]) ** 2) - 1 / 105) > 1e-4
    assert float(w3 @ x3[:, 2] ** 4) == pytest.approx(0.2, abs=1e-15)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_vmf_density_is_normalised(d: int) -> None:
    """The von Mises-Fisher density against the uniform probability integrates to 1 (d = 2, 3 by
    the exact rules, d = 5 by QMC to its accuracy)."""
    mu = np.zeros(d)
    mu[0] = 1.0
    x, w = sphere_rule(4096 if d == 5 else 512, d)
    got = float(w @ _vmf_density(x, 2.0, mu))
    assert got == pytest.approx(1.0, abs=1e-12 if d < 5 else 2e-3)


def test_density_weights_mean_direction() -> None:
    """Weights of vMF(e_1, kappa) on the circle give E[cos a] = I_1(kappa) / I_0(kappa)."""
    x, w = circle_rule(64)
    wt = _density_weights(x, w, [(1.0, 2.0, [1.0, 0.0])])
    assert float(wt @ x[:, 0]) == pytest.approx(special.iv(1, 2.0) / special.iv(0, 2.0), abs=1e-13)
    # and the i.i.d. sampler agrees in law (seeded; 4000 draws: se about 0.008)
    s = sample_initial(4000, 2, np.random.default_rng(1), [(1.0, 2.0, [1.0, 0.0])])
    assert float(s[:, 0].mean()) == pytest.approx(special.iv(1, 2.0) / special.iv(0, 2.0), abs=0.03)
    s3 = sample_initial(4000, 3, np.random.default_rng(2), [(1.0, 2.0, [0.0, 0.0, 1.0])])
    assert float(s3[:, 2].mean()) == pytest.approx(1 / math.tanh(2.0) - 1 / 2.0, abs=0.03)


def test_merge_keeps_mass_and_field() -> None:
    """Coincident nodes merge into one of summed weight; the attention field is unchanged."""
    x0 = torch.tensor(sample_initial(5, 3, np.random.default_rng(0)))
    x = torch.cat([x0, x0[:2]]).unsqueeze(0)  # nodes 5, 6 repeat nodes 0, 1
    w = torch.tensor([[1.0, 2.0, 1.0, 1.0, 1.0, 3.0, 1.0]], dtype=torch.float64) / 10
    xm, wm = merge_nodes(x, w, 1e-12)
    assert xm.shape == (1, 5, 3) and float(wm.sum()) == pytest.approx(1.0, abs=1e-15)
    assert sorted(wm[0].tolist()) == pytest.approx([0.1, 0.1, 0.1, 0.3, 0.4])
    p = ModelParams(n=2, d=3, beta=2.0)
    pts = torch.tensor(sample_initial(9, 3, np.random.default_rng(1)))
    assert torch.allclose(_field_at(pts, x, w, p), _field_at(pts, xm, wm, p), atol=1e-14)


def test_coupled_systems_do_not_see_each_other() -> None:
    """A system's path depends on the seed and run only: not on the systems beside it or the
    batch size."""
    p = ModelParams(n=2, d=3, beta=1.0)
    g = TimeGrid.make(T=0.5, dt=0.05)
    a0 = sample_initial(6, 3, np.random.default_rng(3))
    b0 = sample_initial(9, 3, np.random.default_rng(4))
    kw = dict(runs=3, seed=7, stopping=StoppingRule(), merge_tol=None)
    one = run_coupled(p, g, [("a", a0, None)], **kw)
    two = run_coupled(p, g, [("b", b0, None), ("a", a0, None)],
                      execution=Execution(batch_size=2), **kw)
    assert torch.equal(one.x[0], two.x[1])
    assert float((one.x[0][0] - one.x[0][1]).abs().max()) > 1e-2  # runs differ


def test_symmetric_start_keeps_half_mass() -> None:
    """The flow keeps antipodal symmetry (y(-x) = -y(x)): from the trapezoid nodes (symmetric for
    even K) the limit ends as two atoms of mass exactly 1/2, on every path."""
    rows, masses = absorption_table(2, 3.0, [], K=32, runs=3, seed=2, T=30.0, dt=0.05,
                                    stopping=StoppingRule.decided(1e-4))
    assert rows[0]["p_decided"] == 1.0
    assert np.allclose(masses[0], 0.5, atol=1e-12)


def test_particles_against_limit_on_one_path() -> None:
    """Seeded statistics: 48 i.i.d. samples of n uniform particles on ONE noise path (d = 2,
    beta = 1, T = 1) against the 256-node limit. The quarter-circle mass of the particles is
    unbiased for the limit's up to O(1/n) (|z| < 3.5), and its spread falls like n^-1/2 (the
    ratio of standard deviations between n = 32 and 128 is 2, within sampling error)."""
    p = ModelParams(n=2, d=2, beta=1.0)
    rng = np.random.default_rng(5)
    draws, ns = 48, (32, 128)
    g = TimeGrid.make(T=1.0, dt=0.02)
    kw = dict(seed=3, stopping=StoppingRule(), merge_tol=None)
    lim = run_coupled(p, g, [("limit", *circle_rule(256))], runs=1, **kw)
    parts = run_coupled(p, g, [(f"n{n}", np.stack([sample_initial(n, 2, rng) for _ in range(draws)]),
                                None) for n in ns], runs=draws, shared_path=True, **kw)
    starts, arc = np.array([0.3]), np.pi / 2
    limit = arc_masses(lim.x[0], lim.w[0], starts, arc)[0, 0]
    assert 0.05 < limit < 0.45 and abs(limit - 0.25) > 0.02  # the flow moved the mass
    sds = []
    for i in range(len(ns)):
        v = _arc_counts(parts.x[i], parts.w[i], starts, arc)[:, 0]
        z = (v.mean() - limit) / (v.std(ddof=1) / math.sqrt(draws))
        assert abs(z) < 3.5
        sds.append(v.std(ddof=1))
    assert 1.4 < sds[0] / sds[1] < 2.9


def test_bad_input() -> None:
    p = ModelParams(n=2, d=2)
    g = TimeGrid.make(T=0.1, dt=0.05)
    with pytest.raises(ParameterError, match="merge_tol"):
        run_coupled(p, g, [("a", circle_rule(4)[0], None)],
                    stopping=StoppingRule.decided(1e-6), merge_tol=1e-3)
    with pytest.raises(ParameterError, match="norm='post'"):
        run_coupled(p.with_(norm="pre"), g, [("a", circle_rule(4)[0], None)])
    with pytest.raises(ParameterError, match="rule='circle' needs d = 2"):
        sphere_rule(10, 3, "circle")
    with pytest.raises(ParameterError, match="mixture"):
        _density_weights(*circle_rule(8), [(1.0, -2.0, [1.0, 0.0])])
    assert _qmc_rule(16, 4)[0].shape == (16, 4)


def test_minority_mass_counts_weights() -> None:
    x = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]]])
    w = torch.tensor([[0.5, 0.2, 0.3]])
    assert minority_mass(x, w)[0] == pytest.approx(0.2)


def test_sweep_kind_and_cli(tmp_path) -> None:
    """The sweep kind `meanfield` is found by name; the CLI runs the table as a sweep of it into
    --out and refuses bad input."""
    from typer.testing import CliRunner

    from tokensde.cli import app
    from tokensde.sweep import load_table, sweep_status
    from tokensde.sweep.kinds import get_kind

    st = get_kind("meanfield")({"d": 2, "beta": 3.0, "n": 0, "K": 16, "runs": 2, "T": 20.0,
                                "dt": 0.05}, 0)
    assert st["p_decided"] == 1.0 and st["minority_mean"] == pytest.approx(0.5, abs=1e-12)
    assert len(st["minority_runs"]) == 2 and "runs" not in st  # no clash with the parameter
    out = tmp_path / "mf"
    res = CliRunner().invoke(app, ["meanfield", "table", "--n", "8", "--runs", "2", "--K", "16",
                                   "--dt", "0.05", "--time", "20", "--out", str(out)])
    assert res.exit_code == 0, res.output
    status = sweep_status(out)
    assert status["kind"] == "meanfield" and status["done"] == 4 and status["failed"] == 0
    table = load_table(out)
    assert set(table["runs"]) == {2} and sorted(set(table["n"])) == [0, 8]
    bad = CliRunner().invoke(app, ["meanfield", "table", "--start", "grid", "--runs", "1"])
    assert bad.exit_code == 2 and "--start must be one of" in bad.output


@pytest.mark.slow
def test_report_section_tiny(tmp_path) -> None:
    """The report section `meanfield` builds at tiny size, shows the limit at 1/2, and reuses its
    saved table."""
    from tokensde import study

    ctx = study.Context(tmp_path, "tiny", workers=1)
    sec = study.build_section("meanfield", ctx)
    assert sec.status == "ok", sec.note
    rows = sec.tables[0].rows
    limit = [r for r in rows if r[3] == "limit"]
    assert len(limit) == 2 and all(r[8] == pytest.approx(0.5, abs=1e-12) for r in limit)
    assert all(r[7].startswith("1.0") or r[7] == "undecided" for r in limit)  # the rule's text
    assert (tmp_path / "figures" / "meanfield.png").exists()
    assert study.build_section("meanfield", ctx).provenance["reused"] is True
