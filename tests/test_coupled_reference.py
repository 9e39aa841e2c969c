"""`coupled_states` and `coupled_samples` reproduce, on fixed seeds, the values saved before their
refactor into layer steps of `tokensde.sim` (tests/data/coupled_reference.npz), and `coupled_paths`
those saved before it became an entry of the one coupled stepper (tests/data/coupled_paths.npz).

The saved values come from the code of commit 6b8f595 (`python tests/test_coupled_reference.py
--write` there): plain matrix noise, heads with query/key forms fixed per run, forms redrawn every
layer with several draws per head, and an MLP block. On the machine that wrote them the refactored
code gives them bit for bit (max abs diff 0.0); the tolerance, 1e-13, only allows another BLAS to
round differently.

tests/data/coupled_paths.npz comes from the code of commit 7cfb8c6, where `coupled_paths` had its
own loop in `tokensde.sim.sde` (`python tests/test_coupled_reference.py --write-paths` run with
that commit's `src` first on `PYTHONPATH`); the stepper of `tokensde.sim.coupled` gives it bit for
bit, with more than 16 substeps a layer too (the network's increment is `dW.sum(1)` as before).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from tokensde import ModelParams, TimeGrid
from tokensde.analysis.level_samples import _PROBLEMS, Problem, coupled_samples
from tokensde.sim import coupled_paths, coupled_states
from tokensde.sim.rng import RunStreams
from tokensde.sim.simulate import MLP_STREAM, QK_STREAM

DATA = Path(__file__).parent / "data" / "coupled_reference.npz"
PATHS = Path(__file__).parent / "data" / "coupled_paths.npz"
CASES: dict[str, ModelParams] = {
    "matrix": ModelParams(n=3, d=3, beta=1.0),
    "heads_fixed_forms": ModelParams(n=3, d=3, beta=1.0, heads=2, qk="gaussian", qk_scale=0.5),
    "forms_per_layer": ModelParams(n=3, d=4, beta=2.0, heads=2, qk="goe", qk_redraw="layer",
                                   qk_samples=2),
    "mlp": ModelParams(n=4, d=3, beta=2.0, mlp="relu", mlp_sigma=1.0),
}
STATS = {"pair_mean": "m", "pair_square_mean": "s"}


def compute() -> dict[str, np.ndarray]:
    """Final states of every case (4 runs, T = 0.5, levels 2 and 4, 8 fine steps, both laws) and
    the per-run samples of the two-token problem and of the MLP case."""
    out: dict[str, np.ndarray] = {}
    for name, p in CASES.items():
        g = torch.Generator().manual_seed(1)
        x0 = torch.nn.functional.normalize(
            torch.randn(4, p.n, p.d, dtype=torch.float64, generator=g), dim=-1)
        rs = RunStreams(3, 4)
        nets, fine, half = coupled_states(x0, p, 0.5, (2, 4), 8, rs, progress=None,
                                          qk_rs=rs.derived(QK_STREAM),
                                          mlp_rs=rs.derived(MLP_STREAM))
        for (law, L), x in nets.items():
            out[f"{name}/{law}/{L}"] = x.numpy()
        out[f"{name}/fine"], out[f"{name}/half"] = fine.numpy(), half.numpy()
    problems = {"two_tokens": _PROBLEMS["two_tokens"],
                "mlp": Problem("mlp", CASES["mlp"], T=0.5, statistics=STATS)}
    for name, prob in problems.items():
        s = coupled_samples(prob, levels=(2, 4), ref_steps=8, runs=6, seed=2,
                            strong_at=(0.5, 1.0))
        for key in ("net", "ref_fine", "ref_half", "sq_err"):
            out[f"samples/{name}/{key}"] = getattr(s, key)
    return out


def assert_saved(want: np.lib.npyio.NpzFile, got: dict[str, np.ndarray]) -> None:
    """Every saved array reproduced to 1e-13, and no other array computed."""
    assert sorted(got) == sorted(want.files)
    for key in want.files:
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-13, err_msg=key)


def test_coupled_states_and_samples_equal_the_values_saved_before_the_refactor():
    want = np.load(DATA)
    assert_saved(want, compute())
    # the cases differ from one another: the saved values are not a constant
    assert not np.allclose(want["matrix/gaussian/4"], want["matrix/uniform/4"])
    assert not np.allclose(want["mlp/fine"], want["mlp/half"])


PATH_CASES: dict[str, ModelParams] = {
    "matrix": ModelParams(n=3, d=3, beta=1.0),
    "mean": ModelParams(n=4, d=3, beta=1.5, mean="identity", sigma=0.7),
    "heads": ModelParams(n=3, d=3, beta=1.0, heads=2),
    "usa": ModelParams(n=3, d=3, beta=1.0, attention="usa"),
}


def compute_paths() -> dict[str, np.ndarray]:
    """Final states `(network, sde)` of `coupled_paths` for every case, at several layer counts
    and substeps (17 and 40: above the 16 rows torch sums one by one), with and without token
    weights."""
    out: dict[str, np.ndarray] = {}
    for name, p in PATH_CASES.items():
        shape = (p.d, p.d) if p.heads == 1 else (p.heads, p.d, p.d)
        w = torch.tensor([0.5, 1.0, 2.0] + [1.0] * (p.n - 3), dtype=torch.float64)
        for L, sub in ((3, 1), (4, 4), (2, 8), (2, 17), (1, 40)):
            g = torch.Generator().manual_seed(11)
            x0 = torch.nn.functional.normalize(
                torch.randn(6, p.n, p.d, dtype=torch.float64, generator=g), dim=-1)
            grid = TimeGrid(L, 0.7 / L)
            h = grid.dt / sub
            for tag, weights in (("plain", None), ("weights", w)):
                def increments(k: int, sub: int = sub, h: float = h, shape: tuple = shape,
                               g: torch.Generator = g) -> torch.Tensor:
                    return h**0.5 * torch.randn(6, sub, *shape, dtype=torch.float64, generator=g)

                net, sde = coupled_paths(x0, p, grid, increments, sub, weights=weights)
                out[f"{name}/{L}/{sub}/{tag}/net"] = net.numpy()
                out[f"{name}/{L}/{sub}/{tag}/sde"] = sde.numpy()
    return out


def test_coupled_paths_equals_the_values_saved_before_the_one_stepper():
    want = np.load(PATHS)
    assert_saved(want, compute_paths())
    assert not np.allclose(want["matrix/2/17/plain/net"], want["matrix/2/17/plain/sde"])


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        np.savez_compressed(DATA, **compute())
        print(f"wrote {DATA}")
    elif sys.argv[1:] == ["--write-paths"]:
        np.savez_compressed(PATHS, **compute_paths())
        print(f"wrote {PATHS}")
    else:
        vals, ref = compute(), np.load(DATA)
        print(max(float(np.abs(vals[k] - ref[k]).max()) for k in ref.files))
