"""torch-encoder's Linear biases in the mapping (docs/real.md), the layer-adjusted verdict of
`tokensde real` (Sidak threshold, inits to resolve a gap), and the real network against its
prediction with biases at several sizes and both norm placements (slow)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.model.checks import ParameterError
from tokensde.real import RealSpec, build, map_network, run_real
from tokensde.real import mapping as mapping_mod
from tokensde.real.experiment import agreement, layer_threshold
from tokensde.real.mapping import to_model
from tokensde.real.measure import summarise
from tokensde.real.predict import predict

TINY = {"width": 32, "heads": 4, "ctx": 16, "layers": 4}


def test_bias_scales_equal_the_measured_variances_of_the_built_biases():
    """The mapped `bias_sigma` and `mlp_bias` against the biases torch draws: the pooled entry
    variances of linear2.bias and linear1.bias over 4 inits x 12 layers (uniform, so the sample
    variance of 6144 / 24576 entries is within 5 % of the truth at many sigma), put through
    `dt bias_sigma^2 = var_b2 / (d r0^2)` and `mlp_bias^2 = var_b1 / (d s var_1)`."""
    spec = RealSpec(arch="torch-encoder", width=128, heads=4, ctx=8, layers=12)
    b1, b2 = [], []
    for seed in range(4):
        net = build(spec, seed)
        b1 += [blk.linear1.bias.detach().double() for blk in net.blocks]
        b2 += [blk.linear2.bias.detach().double() for blk in net.blocks]
    var_b1, var_b2 = float(torch.cat(b1).var()), float(torch.cat(b2).var())
    m = map_network(net)
    p, law, d, dt = m.params, m.law, 128, m.grid.dt
    assert dt * p.bias_sigma ** 2 * d * law.radius2 == pytest.approx(var_b2, rel=0.05)
    assert p.mlp_bias ** 2 * d * law.shrink * law.var_1 == pytest.approx(var_b1, rel=0.05)
    assert p.bias_sigma == pytest.approx(1 / 128, rel=1e-12)  # sqrt(L / (12 d^2)) at L = 12
    # the attention's biases start at zero: nothing else to map
    for blk in net.blocks:
        assert not blk.self_attn.in_proj_bias.detach().any()
        assert not blk.self_attn.out_proj.bias.detach().any()


def test_switches_keep_the_right_biases():
    on = map_network(build(RealSpec(arch="torch-encoder", **TINY), 0)).params
    off = map_network(build(RealSpec(arch="torch-encoder", bias=False, **TINY), 0)).params
    no_mlp = map_network(build(RealSpec(arch="torch-encoder", mlp=False, **TINY), 0)).params
    assert on.bias_sigma > 0 and on.mlp_bias > 0 and not off.has_bias
    # W_2 zero: the output bias stays, the hidden bias has nothing to act on
    assert no_mlp.bias_sigma == on.bias_sigma and no_mlp.mlp_bias == 0 and no_mlp.mlp == "none"
    post = map_network(build(RealSpec(arch="torch-encoder", norm_first=False, **TINY), 0))
    assert post.params.norm == "post" and post.params.bias_sigma == pytest.approx(
        math.sqrt(4 / (3 * 128 * 32)), rel=1e-12)  # var_b2 / (d r0^2 dt), m = 128, L = 4


def test_sidak_threshold_has_its_false_alarm_rate():
    """Independent standard normal z for K layers: max |z| passes `layer_threshold(K)` in 5 % of
    200 000 seeded draws (binomial 5-sigma band); K = 1 is the two-sided 1.96."""
    assert layer_threshold(1) == pytest.approx(1.959964, abs=1e-6)
    rng = np.random.default_rng(0)
    reps = 200_000
    for k in (4, 12, 48):
        z = rng.standard_normal((reps, k))
        rate = float((np.abs(z).max(1) > layer_threshold(k)).mean())
        assert abs(rate - 0.05) < 5 * math.sqrt(0.05 * 0.95 / reps), (k, rate)
    assert layer_threshold(12) > layer_threshold(4) > 1.96
    with pytest.raises(ParameterError, match="fwer"):
        layer_threshold(12, fwer=1.5)


def _table(diff: list[float], se: float, units: int) -> pd.DataFrame:
    rows = []
    for layer, dv in enumerate([0.0, *diff]):
        for side, mean in (("real", 0.5 + dv), ("network", 0.5)):
            rows.append({"side": side, "layer": layer, "stat": "cos_mean", "mean": mean,
                         "se": se / math.sqrt(2), "units": units})
    return pd.DataFrame(rows)


def test_verdict_and_the_inits_that_would_resolve_the_largest_open_gap():
    """Combined SE 0.01: z = 100 diff. Gaps of z 1, -2.5, 2 over 3 layers (threshold 2.39):
    layer 2 disagrees; the largest unresolved gap is layer 3 (z 2), resolved at
    100 (2.39 / 2)^2 = 143 inits."""
    a = agreement(_table([0.01, -0.025, 0.02], 0.01, 100))
    thr = layer_threshold(3)
    assert a["threshold"] == pytest.approx(thr) and not a["agrees"]
    assert a["disagree_at"] == [2] and a["at_layer_z"] == 2
    assert a["z"] == pytest.approx([1.0, -2.5, 2.0])
    assert a["unresolved_layer"] == 3 and a["unresolved_z"] == pytest.approx(2.0)
    assert a["inits_to_resolve"] == math.ceil(100 * (thr / 2.0) ** 2)
    ok = agreement(_table([0.01, 0.02], 0.01, 64))
    assert ok["agrees"] and ok["disagree_at"] == [] and ok["unresolved_layer"] == 2


RIGHT = mapping_mod._map_torch_encoder


def _wrong(net, radius2=None):
    """The mapping with the value path's variance doubled (a wrong model that must be caught)."""
    m = RIGHT(net)
    return to_model(replace(m.law, var_v=2 * m.law.var_v))


def test_cli_prints_the_z_and_exits_1_when_the_model_disagrees(tmp_path, monkeypatch):
    """16 inits of a small encoder: the right mapping agrees (exit 0); a wrong one (value
    variance doubled) disagrees, and the command says so and exits 1."""
    args = ["real", "torch-encoder", "--width", "32", "--heads", "4", "--ctx", "16",
            "--layers", "4", "--inits", "16", "--seed", "3"]
    good = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "good")])
    assert good.exit_code == 0, good.output
    assert "agrees: largest |z|" in good.output and "Sidak threshold 2.49" in good.output
    assert "z = (real - tokensde) / combined SE, by layer: 1:" in good.output
    monkeypatch.setitem(mapping_mod.__dict__, "_map_torch_encoder", _wrong)
    bad = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 1, bad.output
    assert isinstance(bad.exception, SystemExit), bad.exception  # an exit, not a crash
    assert "DISAGREES at layers" in bad.output and "Traceback" not in bad.output
    assert (tmp_path / "bad" / "real.parquet").exists()  # the results are written first


CASES = [  # width, layers, norm_first, mlp (60 s in all on an idle 2-core machine)
    (32, 4, True, False), (32, 4, False, False), (32, 4, True, True), (32, 4, False, True),
    (64, 8, True, False), (64, 8, False, False), (64, 8, True, True), (64, 8, False, True)]


@pytest.fixture
def one_thread():
    """One torch thread, as `tokensde real` runs by default (two threads on two shared cores
    were several times slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize(("width", "layers", "norm_first", "mlp"), CASES)
def test_encoder_with_biases_agrees_at_500_inits_and_without_them_it_would_not(
        width, layers, norm_first, mlp, one_thread):
    """torch's default init (biases on), 500 inits x 2 inputs, 16 tokens: the largest |z| of
    the mean token cosine is within the Sidak threshold for the layers. The same embeddings
    predicted by the mapping without the biases must disagree when the MLP's weights are off
    (`--no-mlp`, the sharpest case: the bias is then the whole MLP sublayer)."""
    spec = RealSpec(arch="torch-encoder", width=width, heads=4, ctx=16, layers=layers,
                    norm_first=norm_first, mlp=mlp)
    run = run_real(spec, inits=500, inputs=2, seed=21, sde=False)
    a = run.agreement
    assert a["agrees"], a
    if not mlp:
        law = replace(run.mapping.law, var_b1=0.0, var_b2=0.0)
        assert run.embeddings is not None
        _, pred = predict(to_model(law), run.embeddings, 5)
        real = run.table[run.table.side == "real"]
        t = pd.concat([real, summarise(pred).assign(side="network", frac=0.0)])
        assert not agreement(t)["agrees"]
