"""The asymmetric start of the many-token table (`--start mixture`): its law, its refusals, and
the limit it gives (bipolar states that antipodal symmetry does not force)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.meanfield.absorption import _parse_mixture, _particle_starts, absorption_table
from tokensde.model.checks import ParameterError


def test_mixture_text_gives_masses_and_directions():
    comps = _parse_mixture("0.7:4:0;0.3:2:90", 3)
    assert [c[:2] for c in comps] == [(0.7, 4.0), (0.3, 2.0)]
    assert np.allclose(comps[1][2], [0.0, 1.0, 0.0], atol=1e-15)
    for bad in ("", "1:1", "a:1:0", "0:1:0", "1:-1:0", "1:1:nan"):
        with pytest.raises(ParameterError, match="mixture"):
            _parse_mixture(bad, 2)


def test_mixture_start_draws_the_von_mises_law():
    """Default '1:1:0': E cos(theta) = I_1(1) / I_0(1) = 0.446 (an antipodally symmetric start
    has 0); 4000 draws, standard error 0.011."""
    x = _particle_starts(4000, 2, 1, "mixture", seed=3)[0]
    assert abs(x[:, 0].mean() - special.i1(1.0) / special.i0(1.0)) < 0.045
    assert abs(x[:, 1].mean()) < 0.045


@pytest.mark.slow
def test_mixture_limit_is_bipolar_below_one_half():
    """From the asymmetric start the limit ends as two antipodal atoms whose minority mass is
    below 1/2 (symmetry would force exactly 1/2): beta = 3, K = 32, 3 paths (~6 s)."""
    rows, masses = absorption_table(2, 3.0, [], 32, "mixture", runs=3, seed=1, T=30.0, dt=0.05)
    m = masses[0]
    assert rows[0]["k_decided"] == 3
    assert np.all(m > 0.05) and np.all(m < 0.49), m


def test_cli_refuses_a_bad_mixture_by_name(tmp_path):
    res = CliRunner().invoke(app, ["meanfield", "table", "--start", "mixture", "--mixture",
                                   "1:x:0", "--n", "4", "--K", "4", "--runs", "1",
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "--mixture" in res.output
