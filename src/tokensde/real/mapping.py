"""The mapping: a real architecture's configuration at init -> the tokensde model (ModelParams +
TimeGrid) whose discrete network has the real network's law (docs/real.md, its table).

Each architecture has one function (`map_gpt2`, `map_bert`, `map_vit`, `map_torch_encoder`) that
reads its configuration into a `BlockLaw` (the second moments of every weight at init and where the
LayerNorms sit); `to_model` turns a `BlockLaw` into parameters. With residual stream `x` of
per-coordinate second moment `r0^2` at the embeddings, branch input `u = LN(x)` (`|u|^2 = d s`,
`s = r0^2 / (r0^2 + eps)` before the first layer), value path `W_O W_V` per head, `L` layers mapped
onto depth time `[0, 1]` (`dt = 1/L`, depth fraction `k/L`):

- value noise: `dt sigma^2 = d var_O var_V s / r0^2` (pre-norm; post-norm `r0 = s = 1`);
- query/key form of each head, redrawn every layer: `beta qk_scale = d s sqrt(var_Q var_K)` (the
  standard deviation of a logit between orthogonal tokens), law 'gaussian';
- MLP: activation at pre-activation variance `q = d s var_1` (`gelu_at(q)`; ReLU is scale free),
  `dt mlp_sigma^2 = m var_2 kappa_q(1) / (d r0^2)`, width m (tokensde's block gives a unit
  token an output of variance mlp_sigma^2 per coordinate; the value noise sigma^2 |y|^2); the
  gated SwiGLU block `W_2 (silu(W_1 u) * W_3 u)` (Llama): `swiglu_at(q)`, gate variance q,
  input variance `q_3 = d s var_3`, `dt mlp_sigma^2 = m var_2 q_3 kappa_q(1) / (d r0^2)`
  (`kappa_q` the dual kernel of silu at q), model width `2 m` (gates and inputs);
- biases of the MLP (torch's Linear default; zero in the HuggingFace models): the output bias of
  entry variance `var_b2`, one vector added to every token, `dt bias_sigma^2 = var_b2 / (d r0^2)`;
  the hidden bias of entry variance `var_b1` against pre-activations of variance q,
  `mlp_bias^2 = var_b1 / q`.

A network whose residual branches scale as `1/L` in variance (GPT-2's `1/sqrt(2 L)` projections)
maps to parameters that do not depend on `L`: its curve in depth fraction has a limit, the SDE. One
without that scaling maps to `sigma^2 ~ L`: no limit (`has_limit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..model.mlp import MLPS
from ..model.mlp.gelu import gelu_at
from ..model.mlp.swiglu import swiglu_at
from ..model.params import ModelParams, TimeGrid
from .models import RealNet, RealSpec

_BETA = 1e-3  # the identity part beta <u_i, u_j> of tokensde's form I + s R is kept this small:
# the real form W_Q^T W_K has none, so beta qk_scale carries the whole logit scale


@dataclass(frozen=True)
class BlockLaw:
    """A residual block at init in second moments: width `d`, `heads`, `layers`, `n` tokens,
    `causal`, `norm` ('pre' | 'post'), entry variances of the query, key, value and output
    projections, MLP `activation` ('gelu' | 'relu' | 'swiglu' | 'none'), hidden `width` (the
    gated width for 'swiglu'), entry variances `var_1` (the gate's for 'swiglu'), `var_2`, the
    norm's `eps`, `radius2` = r0^2 (per-coordinate second moment of the
    residual stream at the embeddings), `notes` (pieces approximated), `depth_scaled` (the
    branches' variances scale as 1/L), the entry variances `var_b1`, `var_b2` of the MLP's
    hidden and output biases (0: none) and `centred` (the LayerNorms subtract the mean; False:
    RMS norms), `var_3` (the SwiGLU input projection's entry variance)."""

    d: int
    heads: int
    layers: int
    n: int
    causal: bool
    norm: str
    var_q: float
    var_k: float
    var_v: float
    var_o: float
    activation: str
    width: int
    var_1: float
    var_2: float
    eps: float
    radius2: float
    notes: tuple[str, ...] = field(default=())
    depth_scaled: bool = False
    var_b1: float = 0.0
    var_b2: float = 0.0
    centred: bool = False
    var_3: float = 0.0

    @property
    def model_d(self) -> int:
        """The model's dimension: `d - 1` post-LN with centring (every token after a LayerNorm is
        orthogonal to the all-ones vector, and so is every projected branch), else `d`."""
        return self.d - 1 if self.norm == "post" and self.centred else self.d

    @property
    def shrink(self) -> float:
        """`s = r0^2 / (r0^2 + eps)`: LayerNorm's `|u|^2 / d` at the embeddings (1 post-norm)."""
        return self.radius2 / (self.radius2 + self.eps) if self.norm == "pre" else 1.0


@dataclass(frozen=True)
class Mapping:
    """The tokensde model of a real network: `params`, `grid` (depth fraction: `dt = 1/L`),
    `radius2` (r0^2: initial tokens are divided by sqrt(d r0^2)), `law` and `rows`
    (configuration field, value, model parameter, why)."""


    params: ModelParams
    grid: TimeGrid
    law: BlockLaw
    rows: list[tuple[str, Any, str, str]]

    @property
    def radius2(self) -> float:
        """`r0^2` (per-coordinate second moment of the residual stream at the embeddings)."""
        return self.law.radius2

    @property
    def has_limit(self) -> bool:
        """True when the residual branches' variances scale like 1/L (`law.depth_scaled`): then
        `sigma` and `mlp_sigma` do not depend on L, and the curve in depth fraction has the SDE
        as its limit; otherwise `sigma^2` grows like L (collapse by layer count)."""
        return self.law.depth_scaled


def to_model(law: BlockLaw, qk: bool = True) -> Mapping:
    """The tokensde model of a block law `law` (module docstring).

    Args:
        law: the variances of the block's weights and biases.
        qk: the query/key weights are random; False: uniform attention (`beta = 0`), the real
            query/key weights being zero.

    Returns:
        The `Mapping` (model parameters and what they came from).
    """
    L, d, s, r2, dm = law.layers, law.d, law.shrink, law.radius2, law.model_d
    dt = 1.0 / L
    # d: the inner dimension of W_O W_V (its entry variance d var_O var_V), also post-LN in d - 1
    sigma = math.sqrt(d * law.var_o * law.var_v * s / r2 / dt)
    logit = d * s * math.sqrt(law.var_q * law.var_k)
    kw: dict[str, Any] = {"n": law.n, "d": dm, "heads": law.heads, "causal": law.causal,
                          "norm": law.norm, "noise": "matrix", "law": "gaussian", "sigma": sigma}
    if qk and logit > 0:
        kw.update(beta=_BETA, qk="gaussian", qk_scale=logit / _BETA, qk_redraw="layer")
    else:
        kw.update(beta=0.0)
    rows: list[tuple[str, Any, str, str]] = [
        ("width", d, "d" if dm == d else f"d - 1 = {dm}", "tokens live in R^d" if dm == d else
         "post-LN with centring: every token after a LayerNorm is orthogonal to (1, ..., 1), and "
         "so is every branch once the LayerNorm projects it: the model lives in those d - 1 "
         "dimensions, with the same variance per coordinate"),
        ("heads", law.heads, "heads", "head h adds W_O^h W_V^h y^h: value noise of variance "
         "sigma^2/heads per head"),
        ("layers", L, "dt = 1/L", "depth fraction k/L is depth time"),
        ("tokens", law.n, "n", "ctx (or patches + [CLS])"),
        ("causal", law.causal, "causal", "the attention mask"),
        ("norm", law.norm, "norm", "pre: the branch reads LN(x), the residual stream keeps its "
         "radius; post: x <- LN(x + branch)"),
        ("var(W_V) var(W_O)", (law.var_v, law.var_o), f"sigma = {sigma:.4g}",
         "dt sigma^2 = d var_O var_V s / r0^2 (d: the inner dimension of W_O W_V): the second "
         "moment of the value path W_O W_V relative to the stream"),
        ("var(W_Q) var(W_K)", (law.var_q, law.var_k),
         f"qk = gaussian, redraw = layer, beta qk_scale = {logit:.4g}" if qk else "beta = 0",
         "each layer has its own query/key weights: a logit between orthogonal tokens has "
         "standard deviation d s sqrt(var_Q var_K)"),
        ("LayerNorm eps", law.eps, f"s = {s:.6g}", "LN(x) has |u|^2 = d s at the start"),
        ("embeddings", law.radius2, f"r0^2 = {r2:.4g}", "initial tokens = the embeddings / "
         "sqrt(d r0^2)"),
    ]
    if law.activation != "none":
        q = d * s * law.var_1
        name, width, out2, why = _mlp_block_of(law, q)
        mlp_sigma = math.sqrt(law.width * law.var_2 * out2 / (d * r2) / dt)
        kw.update(mlp=name, mlp_sigma=mlp_sigma, mlp_width=width)
        rows += [("activation", law.activation, f"mlp = {name}",
                  f"pre-activation variance q = d s var_1 = {q:.4g}: the kernel of phi at q"),
                 (f"MLP width, var(W_1), var(W_2){', var(W_3)' if law.var_3 else ''}",
                  (law.width, law.var_1, law.var_2, *((law.var_3,) if law.var_3 else ())),
                  f"mlp_width = {width}, mlp_sigma = {mlp_sigma:.4g}", why)]
    if law.var_b2 > 0:
        bias_sigma = math.sqrt(law.var_b2 / (d * r2) / dt)
        kw.update(bias_sigma=bias_sigma)
        rows.append(("MLP output bias var(b_2)", law.var_b2, f"bias_sigma = {bias_sigma:.4g}",
                     "one vector added to every token: dt bias_sigma^2 = var_b2 / (d r0^2)"))
    if law.var_b1 > 0 and law.activation != "none":
        q = d * s * law.var_1
        mlp_bias = math.sqrt(law.var_b1 / q)
        kw.update(mlp_bias=mlp_bias)
        rows.append(("MLP hidden bias var(b_1)", law.var_b1, f"mlp_bias = {mlp_bias:.4g}",
                     "shifts each hidden pre-activation: mlp_bias^2 = var_b1 / q"))
    if law.var_b1 == law.var_b2 == 0:
        rows.append(("biases", 0.0, "none", "zero at init"))
    return Mapping(ModelParams(**kw), TimeGrid.make(layers=L), law, rows)


def _mlp_block_of(law: BlockLaw, q: float) -> tuple[str, int, float, str]:
    """The model's MLP block for `law` at pre-activation variance `q`: its `mlp` name, its
    `mlp_width`, the second moment `E h^2` of one real hidden unit, and the mapping's reason."""
    if law.activation == "swiglu":
        name, q3 = swiglu_at(q), law.d * law.shrink * law.var_3
        out2 = q3 * 2.0 * MLPS.get(name).second_moment  # E h^2 = q_3 kappa_q(1)
        return name, 2 * law.width, out2, (
            f"fused [W_1; W_3]: {law.width} gates and {law.width} inputs; input variance q_3 = d s "
            f"var_3 = {q3:.4g}; dt mlp_sigma^2 = m var_2 q_3 kappa_q(1) / (d r0^2)")
    name = gelu_at(q) if law.activation == "gelu" else law.activation
    out2 = MLPS.get(name).second_moment * (q if law.activation == "relu" else 1.0)
    return name, law.width, out2, ("dt mlp_sigma^2 = m var_2 kappa_q(1) / (d r0^2): the MLP "
                                   "output's second moment per coordinate relative to the stream's")


def _config_of(net: RealNet) -> Any:
    """The HuggingFace configuration object of `net`'s model."""
    cfg: Any = getattr(net.model, "config", None)
    if cfg is None:
        raise ValueError(f"{net.spec.arch} has no configuration object")
    return cfg


def _ln_eps(cfg: Any, name: str, default: float) -> float:
    return float(getattr(cfg, name, default))


def _map_gpt2(net: RealNet) -> Mapping:
    """GPT-2 (pre-LN, causal): every weight N(0, 0.02^2) (`initializer_range`), the residual
    projections (attention's and MLP's c_proj) N(0, 0.02^2 / (2 n_layer)); tokens = wte + wpe,
    r0^2 = 2 * 0.02^2; MLP gelu_new (the tanh form, mapped to the exact GELU)."""
    spec, cfg = net.spec, _config_of(net)
    v = cfg.initializer_range ** 2
    scaled = v / (2 * cfg.n_layer) if spec.residual_scaling else v
    width = cfg.n_inner or 4 * cfg.n_embd
    law = BlockLaw(cfg.n_embd, cfg.n_head, cfg.n_layer, spec.tokens, True, "pre", v, v,
                   v * spec.value_scale ** 2, scaled, "gelu" if spec.mlp else "none", width, v,
                   scaled, _ln_eps(cfg, "layer_norm_epsilon", 1e-5), 2 * v,
                   ("gelu_new (tanh) as exact GELU", "LayerNorm centring as RMS",
                    *(("W_O W_V product as Gaussian",) if spec.value_law == "product" else ())),
                   spec.depth_scaled)
    return to_model(law, qk=spec.qk)


def _map_bert(net: RealNet) -> Mapping:
    """BERT (post-LN, no residual scaling): every weight N(0, 0.02^2); the embeddings (word +
    position + token type) pass a LayerNorm, r0^2 = 1."""
    spec, cfg = net.spec, _config_of(net)
    v = cfg.initializer_range ** 2
    law = BlockLaw(cfg.hidden_size, cfg.num_attention_heads, cfg.num_hidden_layers, spec.tokens,
                   False, "post", v, v, v * spec.value_scale ** 2, v,
                   "gelu" if spec.mlp else "none", cfg.intermediate_size, v, v,
                   _ln_eps(cfg, "layer_norm_eps", 1e-12), 1.0, ("W_O W_V product as Gaussian",),
                   centred=spec.centring)
    return to_model(law, qk=spec.qk)


def _map_vit(net: RealNet, radius2: float) -> Mapping:
    """ViT (pre-LN): every weight N(0, 0.02^2) (truncated at +-2, i.e. not at all at this
    scale); `radius2` = r0^2 of the patch + position embeddings of the images, measured (it
    depends on the data)."""
    spec, cfg = net.spec, _config_of(net)
    v = cfg.initializer_range ** 2
    law = BlockLaw(cfg.hidden_size, cfg.num_attention_heads, cfg.num_hidden_layers, spec.tokens,
                   False, "pre", v, v, v * spec.value_scale ** 2, v,
                   "gelu" if spec.mlp else "none", cfg.intermediate_size, v, v,
                   _ln_eps(cfg, "layer_norm_eps", 1e-12), radius2,
                   ("LayerNorm centring as RMS", "W_O W_V product as Gaussian",
                    "token radii differ (r0^2 is their mean)"))
    return to_model(law, qk=spec.qk)


def _map_torch_encoder(net: RealNet) -> Mapping:
    """torch `nn.TransformerEncoderLayer` (norm_first: pre-LN, else post-LN; ReLU MLP): in_proj
    Xavier-uniform over (3d, d), variance 1/(2d); out_proj, linear1, linear2 torch's Linear
    default, variance 1/(3 fan_in), and so are the biases of linear1 (1/(3d)) and linear2
    (1/(3m)) (`spec.bias`; the attention's biases start at zero); embeddings of per-coordinate
    variance 1 (r0^2 = 1). With `spec.mlp` off (linear2's weight zero) the hidden bias has no
    effect and only linear2's bias remains.

    Args:
        net: a built torch-encoder network.

    Returns:
        Its mapping.
    """
    spec = net.spec
    d, m = spec.width, spec.mlp_ratio * spec.width
    vin = 2.0 / (d + 3 * d)
    centring = ("LayerNorm centring as RMS" if spec.norm_first else
                "the first block's branch reads the uncentred embeddings as centred")
    law = BlockLaw(d, spec.heads, spec.layers, spec.tokens, False,
                   "pre" if spec.norm_first else "post", vin, vin, vin * spec.value_scale ** 2,
                   1.0 / (3 * d), "relu" if spec.mlp else "none", m, 1.0 / (3 * d),
                   1.0 / (3 * m), 1e-5, 1.0,
                   ("uniform entries as Gaussian", *((centring,) if spec.centring else ()),
                    "W_O W_V product as Gaussian",
                    *(("uniform biases as Gaussian",) if spec.bias else ())),
                   var_b1=1.0 / (3 * d) if spec.bias and spec.mlp else 0.0,
                   var_b2=1.0 / (3 * m) if spec.bias else 0.0, centred=spec.centring)
    return to_model(law, qk=spec.qk)


def _map_llama(net: RealNet) -> Mapping:
    """Llama (`LlamaModel`: pre-norm RMSNorm with unit weight, causal, no biases, no residual
    scaling): every linear weight and the token embedding N(0, initializer_range^2), r0^2 =
    initializer_range^2 (no position embedding is added to the stream); the SwiGLU MLP
    `down(silu(gate u) * up u)` of width `intermediate_size` (gate and up N(0, (initializer_range
    mlp_scale)^2)); rotary position embeddings on queries and keys are not modelled
    (docs/real.md, Llama)."""
    spec, cfg = net.spec, _config_of(net)
    v = cfg.initializer_range ** 2
    v13 = v * spec.mlp_scale ** 2
    law = BlockLaw(cfg.hidden_size, cfg.num_attention_heads, cfg.num_hidden_layers, spec.tokens,
                   True, "pre", v, v, v * spec.value_scale ** 2, v,
                   "swiglu" if spec.mlp else "none", cfg.intermediate_size, v13, v,
                   float(cfg.rms_norm_eps), v,
                   ("W_O W_V product as Gaussian",
                    *(("rotary position embeddings not modelled",) if spec.rope else ())),
                   var_3=v13)
    return to_model(law, qk=spec.qk)


def map_network(net: RealNet, radius2: float | None = None) -> Mapping:
    """The mapping of `net`'s architecture onto tokensde's model parameters.

    Args:
        net: the real network at its init.
        radius2: the measured squared radius `r0^2` of the embeddings (ViT only), or None.

    Returns:
        The `Mapping`.
    """
    arch = net.spec.arch
    if arch == "vit":
        if radius2 is None:
            raise ValueError("map_vit needs the measured radius2 of the embeddings")
        return _map_vit(net, radius2)
    return {"gpt2": _map_gpt2, "bert": _map_bert, "torch-encoder": _map_torch_encoder,
            "llama": _map_llama}[arch](net)


def _spec_law_note(spec: RealSpec) -> str:
    """One line naming what differs from the architecture's default init (the switches)."""
    parts = [k for k, v in (("no residual scaling", not spec.residual_scaling),
                            ("no centring", not spec.centring), ("qk off", not spec.qk),
                            ("mlp off", not spec.mlp), ("no biases", not spec.bias),
                            ("rope off (position 0)", not spec.rope))
             if v]
    if spec.value_scale != 1.0:
        parts.append(f"value x{spec.value_scale:g}")
    if spec.mlp_scale != 1.0:
        parts.append(f"W_1, W_3 x{spec.mlp_scale:g}")
    if spec.value_law != "product":
        parts.append(f"{spec.value_law} value path")
    return ", ".join(parts) or "default init"
