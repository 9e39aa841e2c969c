"""Introspection: a user's Transformer, given as a factory `make(seed) -> nn.Module`, read into the
law of its residual blocks at init and mapped onto tokensde's model (docs/own-transformer.md).

`read_network(make, sample)` draws the network under a few seeds, finds its residual blocks (the
one `nn.ModuleList` / `nn.Sequential` whose entries each hold an attention module) and reads each
block:

- its parts from the modules themselves: the attention (`nn.MultiheadAttention`, HuggingFace's
  `GPT2Attention`, `LlamaAttention`, whose rotary embedding is not modelled, `ViTAttention`, and
  `BertSelfAttention` inside `BertAttention`, whose output projection is the dense layer of the
  `BertSelfOutput` beside it: that module's LayerNorm of `dense(h) + x` is then read as the
  block's post-norm), the norms
  (`nn.LayerNorm`: centred; `nn.RMSNorm`, HuggingFace's `LlamaRMSNorm` and tokensde's `RMSNorm`:
  not), the MLP (two `nn.Linear` or HuggingFace `Conv1D` outside the attention, or three: a gated
  MLP, gate and input projections then the output layer);
- its wiring from one forward pass of `sample` with hooks on those parts: which norm's output the
  attention and the MLP read (pre-norm) or whether a norm follows each residual add (post-norm),
  the residual scales `a`, `b` of `x + a attn(.)` and `h + b mlp(.)` (least squares, checked
  exact), the activation between the MLP's layers (matched against ReLU and both GELUs; a gated
  MLP's output layer reading `silu(gate) * input`, SwiGLU, which also tells the gate from the
  input projection) and the attention mask (none, or the causal one; HuggingFace's encoders:
  none hiding a token); for a class that states its norm placement
  (`nn.TransformerEncoderLayer.norm_first`, GPT-2's, Llama's and ViT's pre-norm, BERT's
  post-norm) the probe must agree with it. What lies outside the blocks is not read: the first
  block's input is the start (BERT's embedding LayerNorm, ViT's final layernorm after the last
  block are no part of the model);
- blocks that start as copies of one block (torch's `nn.TransformerEncoder`) are refused: their
  weights are not independent over depth;
- the laws of its weights and biases from the drawn tensors: each entry's second moment `mean(w^2)`
  per seed, with standard error `sqrt((mean(w^4) - mean(w^2)^2) / N)` (N entries, i.i.d.), then
  averaged over seeds (the standard deviation over seeds is kept beside it).

`to_law` checks that every block has one structure and, within `_HOMOGENEITY_Z` standard errors, one
law (tokensde's model has one set of parameters for all layers), folds the residual scales into the
branch variances (`a^2 var_O`, `b^2 var_2`, `b^2 var_b2`) and gives the `BlockLaw` that
`mapping.to_model` turns into `ModelParams`; `map_read` does both, `params_errors` propagates the
standard errors of the variances to the mapped parameters. A block that cannot be read raises
`IntrospectionError` naming the block, its class and the missing or unsupported part.
`run_own` is `experiment.run_real` for such a network (its inits measured, its law read and
predicted from the same embeddings); `prepare_own` loads one from a file `FILE.py:FUNC`
(`load_factory`) and checks it before a run, `own_budget` estimates the run (`tokensde real
module`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from ..model.checks import ParameterError, _check_int, _require
from ..sim.budget import Budget
from ..sim.rng import derive_seed
from .experiment import RealRun, predicted_run, real_run_cost
from .mapping import BlockLaw, Mapping, to_model
from .measure import _TOL, directions_gram, gram_stats
from .models import RMSNorm as TokensdeRMSNorm
from .predict import _SDE_RUNS, _SDE_STEPS

__all__ = ["ATTENTIONS", "BlockRead", "IntrospectionError", "Moment", "NetworkRead", "block_states",
           "draw", "effective", "find_blocks", "gaussian_inputs", "load_factory", "map_read",
           "network_width", "own_budget", "params_errors", "prepare_own", "read_network", "run_own",
           "to_law"]

_HOMOGENEITY_Z = 5.0  # a block's variance further than this many standard errors from the pooled one:
# the blocks do not share one law (refused)
_SAME_TOL = 1e-4  # two probed tensors are the same when max |a - b| <= SAME_TOL max |a| (float32 passes)
_FIT_TOL = 1e-3  # a residual add r = c v is read when |r - c v| <= FIT_TOL |r|
_ACT_TOL = 1e-4  # an activation phi is read when max |g - phi(h)| <= ACT_TOL max |g|
ATTENTIONS: tuple[str, ...] = ("MultiheadAttention", "GPT2Attention", "LlamaAttention",
                               "BertSelfAttention", "ViTAttention", "ViTSelfAttention")
_WRAPPERS: dict[str, tuple[str, str]] = {  # class name -> (the attention inside, its output projection)
    "BertAttention": ("self", "output.dense"),  # BertSelfOutput: dense, then LayerNorm(dense + x)
    "ViTAttention": ("attention", "output.dense"),  # transformers < 5: ViTSelfOutput's dense
}
_HF_QKV: dict[str, tuple[str, str, str, str | None]] = {  # HuggingFace attentions of four nn.Linear
    "LlamaAttention": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "ViTAttention": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "BertSelfAttention": ("query", "key", "value", None),  # the output: the wrapper's dense
    "ViTSelfAttention": ("query", "key", "value", None),
}
_RMS_NORMS: tuple[str, ...] = ("RMSNorm", "LlamaRMSNorm")  # by class name: HuggingFace's, tokensde's
_WEIGHTS: tuple[str, ...] = ("q", "k", "v", "o", "bq", "bk", "bv", "bo", "1", "2", "b1", "b2", "3",
                             "b3")
_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "gelu": nn.functional.gelu,
    "gelu-tanh": lambda h: nn.functional.gelu(h, approximate="tanh"),
}


class IntrospectionError(ParameterError):
    """A network or block that tokensde cannot read; the message names the block, its class and
    the part that is missing or not read yet."""


@dataclass(frozen=True)
class Moment:
    """The entry second moment `mean(w^2)` of one weight: `value` (mean over `seeds` draws),
    `se` (its standard error, from the entries' fourth moment), `sd` (standard deviation of the
    per-seed values), `entries` (per draw), `kurtosis` (`mean(w^4) / mean(w^2)^2`; Gaussian 3,
    uniform 1.8; nan for a zero weight)."""

    value: float
    se: float
    sd: float
    seeds: int
    entries: int
    kurtosis: float


@dataclass(frozen=True)
class BlockRead:
    """One residual block as read: `index`, `cls` (its class name), width `d`, `heads`, `causal`,
    `attention` (class name), `norm` ('pre' | 'post'), `norm_kind` (class name), `centred`
    (LayerNorm subtracts the mean), `eps`, `activation` ('relu' | 'gelu' | 'gelu-tanh' | 'swiglu'
    | 'none'), `width` (MLP hidden width, the gated width for 'swiglu', 0 without an MLP),
    `residual_scale` (attention branch, MLP branch), `moments` (WEIGHTS -> `Moment`: q, k, v, o
    the attention's projections, bq, bk, bv, bo their biases, 1, 2 the MLP's layers (the gate and
    the output layer of a gated MLP), 3 a gated MLP's input projection, b1, b2, b3 their biases;
    absent parts are zero)."""

    index: int
    cls: str
    d: int
    heads: int
    causal: bool
    attention: str
    norm: str
    norm_kind: str
    centred: bool
    eps: float
    activation: str
    width: int
    residual_scale: tuple[float, float]
    moments: dict[str, Moment] = field(default_factory=dict)

    def structure(self) -> tuple[Any, ...]:
        """Everything but the index and the variances: equal in every block of a readable network."""
        return (self.cls, self.d, self.heads, self.causal, self.attention, self.norm,
                self.norm_kind, self.centred, self.eps, self.activation, self.width)


@dataclass(frozen=True)
class NetworkRead:
    """A network as read: `cls` (its class name), `blocks` (one `BlockRead` each), `tokens` (n, of
    the sample), `seeds` (the draws the variances are averaged over), `centred_input` (the
    first block's input tokens have zero mean over their coordinates in the probe, as after
    BERT's embedding LayerNorm)."""

    cls: str
    blocks: tuple[BlockRead, ...]
    tokens: int
    seeds: tuple[int, ...]
    centred_input: bool = False

    @property
    def layers(self) -> int:
        """The number L of residual blocks."""
        return len(self.blocks)

    def pooled(self, key: str) -> Moment:
        """The moment `key` averaged over the blocks (their standard errors combined)."""
        ms = [b.moments[key] for b in self.blocks]
        L = len(ms)
        value = sum(m.value for m in ms) / L
        kurt = [m.kurtosis for m in ms if not math.isnan(m.kurtosis)]
        return Moment(value, math.sqrt(sum(m.se ** 2 for m in ms)) / L,
                      math.sqrt(sum(m.sd ** 2 for m in ms) / L), ms[0].seeds,
                      sum(m.entries for m in ms), sum(kurt) / len(kurt) if kurt else math.nan)


# ---------------------------------------------------------------------------------------------
# drawing and finding the blocks


def draw(make: Callable[[int], nn.Module], seed: int) -> nn.Module:
    """`make(seed)` under torch's global generator seeded with `seed` (restored after), eval mode."""
    seed = _check_int("seed", seed, 0)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = make(seed)
    finally:
        torch.random.set_rng_state(state)
    if not isinstance(model, nn.Module):
        raise IntrospectionError(f"make(seed) must return a torch.nn.Module; got {type(model).__name__}")
    return model.eval()


def _is_attention(module: nn.Module) -> bool:
    return "Attention" in type(module).__name__


def _holds_attention(module: nn.Module) -> bool:
    return any(_is_attention(m) for m in module.modules())


def find_blocks(model: nn.Module, path: str | None = None) -> list[nn.Module]:
    """The residual blocks of `model`: the module at attribute `path` ('encoder.layer'), or the
    one `nn.ModuleList` / `nn.Sequential` whose entries are of one class and each hold an
    attention module."""
    if path is not None:
        obj: Any = model
        for part in path.split("."):
            if not hasattr(obj, part):
                raise IntrospectionError(f"blocks '{path}': {type(model).__name__} has no such "
                                         "attribute")
            obj = getattr(obj, part)
        if not isinstance(obj, nn.ModuleList | nn.Sequential):
            raise IntrospectionError(f"'{path}' of {type(model).__name__} is a "
                                     f"{type(obj).__name__}, not an nn.ModuleList or nn.Sequential")
        return list(obj)
    found = [(name, list(m)) for name, m in model.named_modules()
             if isinstance(m, nn.ModuleList | nn.Sequential) and len(m) > 0
             and len({type(c) for c in m}) == 1 and all(_holds_attention(c) for c in m)]
    if not found:
        raise IntrospectionError(
            f"{type(model).__name__}: no residual blocks found (an nn.ModuleList or nn.Sequential "
            "whose entries are of one class and each hold an attention module); pass blocks='path'")
    if len(found) > 1:
        raise IntrospectionError(f"{type(model).__name__}: several lists of blocks "
                                 f"({', '.join(repr(n) for n, _ in found)}); pass blocks='path'")
    return found[0][1]


# ---------------------------------------------------------------------------------------------
# the parts of one block


def _linear(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(weight as (out, in), bias) of an `nn.Linear` or a HuggingFace `Conv1D` (weight (in, out))."""
    if isinstance(module, nn.Linear):
        return module.weight, module.bias
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):
        conv: Any = module  # a HuggingFace class, read by its attributes
        return conv.weight.T, conv.bias
    return None


@dataclass
class _Parts:
    attention: nn.Module
    norms: list[nn.Module]
    linears: list[nn.Module]
    out_proj: nn.Module | None = None  # the attention's output projection, where it sits outside


def _unwrap(att: nn.Module, where: str) -> tuple[nn.Module, nn.Module | None]:
    """(the attention, its output projection or None) of a module found as the attention: a
    WRAPPERS class (BERT's `BertAttention`) holds the attention and, in a module beside it, the
    output projection (whose residual add and norm are then read as the block's own)."""
    paths = _WRAPPERS.get(type(att).__name__)
    if paths is None or not hasattr(att, paths[0].split(".")[0]):
        return att, None
    inner, out = (att.get_submodule(q) for q in paths)
    if _linear(out) is None:
        raise _fail(where, f"the output projection '{paths[1]}' of {type(att).__name__} is a "
                    f"{type(out).__name__}, not an nn.Linear")
    return inner, out


def _fail(where: str, what: str) -> IntrospectionError:
    return IntrospectionError(f"{where}: {what}")


def _parts(block: nn.Module, where: str) -> _Parts:
    """The attention, norms and MLP layers of `block`; IntrospectionError for anything else that
    holds parameters."""
    atts = [m for m in block.modules() if _is_attention(m)]
    atts = [m for m in atts if not any(m is not a and m in set(a.modules()) for a in atts)]
    if not atts:
        raise _fail(where, "no attention module found")
    if len(atts) > 1:
        raise _fail(where, f"{len(atts)} attention modules (cross-attention or parallel "
                    "attention) are not read yet")
    att, out = _unwrap(atts[0], where)
    if type(att).__name__ not in ATTENTIONS:
        raise _fail(where, f"attention module {type(att).__name__} is not read yet (read: "
                    f"{', '.join(ATTENTIONS)})")
    inside = set(att.modules()) | ({out} if out is not None else set())
    norms: list[nn.Module] = []
    linears: list[tuple[str, nn.Module]] = []
    for name, m in block.named_modules():
        if m in inside:
            continue
        if isinstance(m, nn.LayerNorm | nn.RMSNorm | TokensdeRMSNorm) or type(m).__name__ in _RMS_NORMS:
            norms.append(m)
        elif _linear(m) is not None:
            linears.append((name, m))
        elif m is not block and any(True for _ in m.parameters(recurse=False)):
            raise _fail(where, f"module '{name}' ({type(m).__name__}) holds parameters that are "
                        "not read (read: attention, LayerNorm / RMSNorm, the MLP's two Linear layers)")
    if len(linears) not in (0, 2, 3):
        owner = _owner(block, [n for n, _ in linears])
        raise _fail(f"{where}, {owner}" if owner else where, f"{len(linears)} Linear layers "
                    "outside the attention; an MLP of two, or a gated MLP of three, is read")
    return _Parts(att, norms, [m for _, m in linears], out)


def _owner(block: nn.Module, names: Sequence[str]) -> str:
    """The class name of the innermost module of `block` that holds all `names`."""
    if not names:
        return ""
    common = names[0].split(".")[:-1]
    for n in names[1:]:
        parts = n.split(".")
        while common != parts[:len(common)]:
            common = common[:-1]
    return type(block.get_submodule(".".join(common))).__name__ if common else ""


# ---------------------------------------------------------------------------------------------
# the weights of the attention


def _attention_weights(p: _Parts, where: str) -> tuple[int, int, dict[str, torch.Tensor | None]]:
    """(width d, heads, {q, k, v, o, bq, bk, bv, bo}) of a block's read attention."""
    att = p.attention
    if isinstance(att, nn.MultiheadAttention):
        d = att.embed_dim
        if not att._qkv_same_embed_dim:
            raise _fail(where, "MultiheadAttention with kdim or vdim other than embed_dim is not read")
        if att.bias_k is not None or att.bias_v is not None:
            raise _fail(where, "MultiheadAttention with add_bias_kv is not read")
        q, k, v = att.in_proj_weight.split(d, 0)
        bq = bk = bv = None
        if att.in_proj_bias is not None:
            bq, bk, bv = att.in_proj_bias.split(d, 0)
        return d, att.num_heads, {"q": q, "k": k, "v": v, "o": att.out_proj.weight, "bq": bq,
                                  "bk": bk, "bv": bv, "bo": att.out_proj.bias}
    if type(att).__name__ in _HF_QKV:
        return _hf_attention(att, p.out_proj, where)
    # GPT2Attention: c_attn Conv1D (d, 3d) columns q | k | v, c_proj Conv1D
    if getattr(att, "is_cross_attention", False):
        raise _fail(where, "GPT-2 cross-attention is not read")
    if not getattr(att, "scale_attn_weights", True) or getattr(att, "scale_attn_by_inverse_layer_idx",
                                                               False):
        raise _fail(where, "GPT2Attention with a logit scale other than 1/sqrt(d_head) is not read")
    gpt2: Any = att  # a HuggingFace class, read by its attributes
    d = gpt2.embed_dim
    w, b = gpt2.c_attn.weight, gpt2.c_attn.bias
    q, k, v = w.T.split(d, 0)
    bq, bk, bv = b.split(d, 0)
    return d, gpt2.num_heads, {"q": q, "k": k, "v": v, "o": gpt2.c_proj.weight.T, "bq": bq,
                               "bk": bk, "bv": bv, "bo": gpt2.c_proj.bias}


def _hf_attention(att: Any, out: nn.Module | None, where: str
                  ) -> tuple[int, int, dict[str, torch.Tensor | None]]:
    """(width d, heads, weights) of a HuggingFace attention of four `nn.Linear` (HF_QKV: Llama's
    and ViT's q/k/v/o_proj; BERT's query/key/value with the output projection `out` beside
    it), logits scaled by 1/sqrt(d_head), one key/value head per query head; Llama's rotary
    embedding of queries and keys is read as absent (noted by `to_law`)."""
    name = type(att).__name__
    *qkv, o_name = _HF_QKV[name]
    cfg: Any = getattr(att, "config", None)
    heads = int(getattr(att, "num_attention_heads", None) or cfg.num_attention_heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    hd = int(getattr(att, "head_dim", None) or att.attention_head_size)
    lin = dict(zip("qkv", (getattr(att, n) for n in qkv), strict=True))
    lin["o"] = getattr(att, o_name) if o_name is not None else out
    if lin["o"] is None:
        raise _fail(where, f"{name}: no output projection found beside it")
    d = lin["q"].in_features
    if kv != heads:
        raise _fail(where, f"grouped-query attention ({kv} key/value heads for {heads} query "
                    "heads) is not read")
    if getattr(att, "position_embedding_type", "absolute") != "absolute":
        raise _fail(where, f"{name} with relative position embeddings "
                    f"('{att.position_embedding_type}') is not read")
    if heads * hd != d or abs(getattr(att, "scaling", hd ** -0.5) - hd ** -0.5) > 1e-12 * hd ** -0.5:
        raise _fail(where, f"{name} with head_dim other than d / heads or a logit scale other "
                    "than 1/sqrt(d_head) is not read")
    wb = {k: _linear(m) for k, m in lin.items()}
    got = {k: v for k, v in wb.items() if v is not None}
    if len(got) != 4:
        raise _fail(where, f"{name}: a projection that is not an nn.Linear is not read")
    return d, heads, {**{k: w for k, (w, _) in got.items()}, **{f"b{k}": b for k, (_, b) in got.items()}}


def _raw_moment(w: torch.Tensor | None) -> tuple[float, float, int, float]:
    """(mean w^2, its standard error, entries, mean w^4) of one drawn tensor (zeros when absent)."""
    if w is None:
        return 0.0, 0.0, 0, 0.0
    x = w.detach().to(torch.float64).flatten()
    m2, m4 = float((x * x).mean()), float((x ** 4).mean())
    return m2, math.sqrt(max(m4 - m2 * m2, 0.0) / x.numel()), x.numel(), m4


def _block_weights(parts: _Parts, where: str) -> tuple[int, int, dict[str, torch.Tensor | None]]:
    """(width d, heads, the block's weights by WEIGHTS key); orders the MLP's layers (d -> m
    first) when their shapes tell."""
    d, heads, ws = _attention_weights(parts, where)
    ws.update(_mlp_weights(parts.linears, d, where))
    return d, heads, ws


def _mlp_weights(linears: list[nn.Module], d: int, where: str) -> dict[str, torch.Tensor | None]:
    """The MLP's weights by WEIGHTS key ('1', 'b1' the first layer or the gated MLP's first
    projection d -> m, '3', 'b3' its second, '2', 'b2' the output layer m -> d); `linears` is
    reordered in place so that the output layer, told by its shape when m != d, comes last."""
    if not linears:
        return dict.fromkeys(("1", "2", "b1", "b2", "3", "b3"))
    layers = [_linear(m) or (torch.empty(0, 0), None) for m in linears]  # every one a layer (_parts)
    outs = [i for i, (w, _) in enumerate(layers) if w.shape[0] == d != w.shape[1]]
    if len(outs) == 1:  # registered before the layer(s) it reads
        linears.append(linears.pop(outs[0]))
        layers.append(layers.pop(outs[0]))
    *ins, (w2, b2) = layers
    m = w2.shape[1]
    if w2.shape[0] != d or any(w.shape != (m, d) for w, _ in ins):
        got = ", ".join(str(tuple(w.shape)) for w, _ in (*ins, (w2, b2)))
        first = f"(m, {d})" + (" twice" if len(ins) == 2 else "")
        raise _fail(where, f"MLP layers of shapes {got} are not {first} then ({d}, m)")
    w1, b1 = ins[0]
    w3, b3 = ins[1] if len(ins) == 2 else (None, None)
    return {"1": w1, "2": w2, "b1": b1, "b2": b2, "3": w3, "b3": b3}


# ---------------------------------------------------------------------------------------------
# the probe: one forward pass with hooks


@dataclass
class _Record:
    """What one forward pass recorded: inputs and outputs of the block and of its parts, and the
    keyword arguments the attention was called with."""

    calls: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=dict)
    attn_args: list[tuple[tuple, dict]] = field(default_factory=list)


def _first(t: Any) -> torch.Tensor:
    return (t[0] if isinstance(t, tuple | list) else t).detach().to(torch.float64)


def _hook_all(blocks: Sequence[nn.Module], parts: Sequence[_Parts]) -> tuple[list[_Record], list[Any]]:
    records = [_Record() for _ in blocks]
    handles = []
    for rec, block, p in zip(records, blocks, parts, strict=True):
        outs = [p.out_proj] if p.out_proj is not None else []
        for m in (block, p.attention, *outs, *p.norms, *p.linears):
            def hook(mod: nn.Module, args: tuple, kwargs: dict, out: Any, r: _Record = rec) -> None:
                x = args[0] if args else next(iter(kwargs.values()))
                r.calls.setdefault(id(mod), []).append((_first(x), _first(out)))
                if _is_attention(mod):
                    r.attn_args.append((args, kwargs))
            handles.append(m.register_forward_hook(hook, with_kwargs=True))
    return records, handles


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= _SAME_TOL * float(a.abs().max()) + 1e-30


def _fit(r: torch.Tensor, v: torch.Tensor | None, where: str, what: str) -> float:
    """The scale c of `r = c v` (least squares), checked to be exact; 1.0 when r = v = 0."""
    if v is None:
        raise _fail(where, f"{what}: the probe recorded no output")
    vv, rr = float((v * v).sum()), float((r * r).sum())
    if vv == 0.0:
        if rr == 0.0:
            return 1.0
        raise _fail(where, f"{what}: the residual add is not input + a multiple of the branch")
    c = float((r * v).sum()) / vv
    if float(((r - c * v) ** 2).sum()) > _FIT_TOL ** 2 * rr:
        raise _fail(where, f"{what}: the residual add is not input + a multiple of the branch")
    return float(f"{c:.6g}")


def _one(rec: _Record, m: nn.Module, where: str, block: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, output) of the one call of `m` in the probe's forward pass."""
    calls = rec.calls.get(id(m), [])
    if len(calls) != 1:
        name = next((n for n, c in block.named_modules() if c is m), "")
        raise _fail(where, f"module '{name}' ({type(m).__name__}) called {len(calls)} times in "
                    "one forward pass (once is read)")
    return calls[0]


def _activation(h: torch.Tensor, g: torch.Tensor, where: str) -> str:
    """The activation phi with `g = phi(h)` (the MLP's hidden pre- and post-activations)."""
    errs = {k: float((g - f(h)).abs().max()) for k, f in _ACTIVATIONS.items()}
    best = min(errs, key=errs.__getitem__)
    if errs[best] > _ACT_TOL * float(g.abs().max()) + 1e-30:
        raise _fail(where, f"the MLP's activation is none of {', '.join(_ACTIVATIONS)} (other "
                    "activations are not read yet)")
    return best


def _gated(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor],
           g: torch.Tensor, where: str) -> tuple[str, bool]:
    """('swiglu', whether the second projection is the gate) of a gated MLP whose projections
    mapped `a[0] -> a[1]` and `b[0] -> b[1]` and whose output layer read `g = silu(gate) * input`."""
    if not _same(a[0], b[0]):
        raise _fail(where, "the gated MLP's two projections read different inputs")
    tol = _ACT_TOL * float(g.abs().max()) + 1e-30
    for swap, (gate, up) in ((False, (a[1], b[1])), (True, (b[1], a[1]))):
        if float((g - nn.functional.silu(gate) * up).abs().max()) <= tol:
            return "swiglu", swap
    raise _fail(where, "the gated MLP is not silu(gate) * input (SwiGLU; other gates are not "
                "read yet)")


def _causal(att: nn.Module, args: tuple, kwargs: dict, n: int, where: str) -> bool:
    """Whether the attention was called with the causal mask (None, or refused if another)."""
    name = type(att).__name__
    if name == "GPT2Attention" or name in _HF_QKV:  # HuggingFace's: the mask is built inside
        if getattr(att, "is_causal", name in ("GPT2Attention", "LlamaAttention")):
            return True
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        if mask is not None and not bool(mask.all() if mask.dtype == torch.bool else
                                         (mask == 0).all()):
            raise _fail(where, "an attention mask (padding) is not read: the probe's attention "
                        "must see every token")
        return False
    if kwargs.get("key_padding_mask") is not None:
        raise _fail(where, "a key_padding_mask is not read")
    mask = kwargs.get("attn_mask", args[4] if len(args) > 4 else None)
    if mask is None:
        return bool(kwargs.get("is_causal", False))
    blocked = mask if mask.dtype == torch.bool else torch.isinf(mask) & (mask < 0)
    upper = torch.ones(n, n, dtype=torch.bool, device=blocked.device).triu(1)
    if blocked.shape[-2:] == (n, n) and bool((blocked == upper).all()):
        if mask.dtype != torch.bool and bool((mask[~upper.expand_as(mask)] != 0).any()):
            raise _fail(where, "an additive attention mask other than the causal one is not read")
        return True
    raise _fail(where, "an attention mask other than the causal one is not read")


_KNOWN_PLACEMENT: dict[str, Callable[[nn.Module], str]] = {
    "TransformerEncoderLayer": lambda b: "pre" if b.norm_first else "post",
    "GPT2Block": lambda b: "pre",
    "LlamaDecoderLayer": lambda b: "pre",
    "BertLayer": lambda b: "post",
    "ViTLayer": lambda b: "pre",
}


def _layout(block: nn.Module, p: _Parts, rec: _Record, where: str) -> dict[str, Any]:
    """Norm placement, residual scales, activation and causality of one block from its probe."""
    x, y = _one(rec, block, where, block)
    a_in, a_out = _one(rec, p.attention, where, block)
    if p.out_proj is not None:  # BERT's: the branch ends at the projection beside the attention
        o_in, o_out = _one(rec, p.out_proj, where, block)
        if not _same(o_in, a_out):
            raise _fail(where, "the output projection does not read the attention's output")
        a_out = o_out
    norms = [(m, *_one(rec, m, where, block)) for m in p.norms]
    has_mlp = bool(p.linears)
    swap = False
    if has_mlp:
        calls = [_one(rec, m, where, block) for m in p.linears]
        (l1_in, h1), (g, m_out) = calls[0], calls[-1]
        act, swap = (_gated(calls[0], calls[1], g, where) if len(calls) == 3 else
                     (_activation(h1, g, where), False))
    else:
        act, l1_in, m_out = "none", None, None

    def norm_with(out: torch.Tensor | None = None, inp: torch.Tensor | None = None) -> Any:
        hit = [n for n in norms if (out is None or _same(out, n[2])) and (inp is None or _same(inp, n[1]))]
        return hit[0] if len(hit) == 1 else None

    used: list[Any] = []
    pre = norm_with(out=a_in, inp=x)
    if pre is not None:
        placement, used = "pre", [pre]
        if has_mlp:
            n2 = norm_with(out=l1_in)
            if n2 is None:
                raise _fail(where, "the MLP does not read a norm's output, as in a pre-norm block")
            used.append(n2)
            h = n2[1]
            a = _fit(h - x, a_out, where, "attention branch")
            b = _fit(y - h, m_out, where, "MLP branch")
        else:
            a, b = _fit(y - x, a_out, where, "attention branch"), 1.0
    elif _same(a_in, x):
        placement = "post"
        n1 = norm_with(out=l1_in) if has_mlp else norm_with(out=y)
        if n1 is None:
            raise _fail(where, "no norm after the attention's residual add (a block without norms is "
                        "not read)")
        used.append(n1)
        a = _fit(n1[1] - x, a_out, where, "attention branch")
        b = 1.0
        if has_mlp:
            n2 = norm_with(out=y)
            if n2 is None:
                raise _fail(where, "no norm after the MLP's residual add, as in a post-norm block")
            used.append(n2)
            b = _fit(n2[1] - n1[2], m_out, where, "MLP branch")
    else:
        raise _fail(where, "the attention reads neither the block's input nor a norm of it")
    if len(used) != len(norms):
        raise _fail(where, f"{len(norms) - len(used)} norm(s) whose place is not read "
                    "(read: one norm per branch, before it or after its residual add)")
    known = _KNOWN_PLACEMENT.get(type(block).__name__)
    if known is not None and known(block) != placement:
        raise _fail(where, f"the probe reads {placement}-norm, the class states {known(block)}-norm")
    args, kwargs = rec.attn_args[0]
    _self_attention(p.attention, args, kwargs, where)
    n = int(x.shape[0] if not getattr(p.attention, "batch_first", True) else x.shape[-2])
    return {"norm": placement, "residual_scale": (a, b), "activation": act,
            "causal": _causal(p.attention, args, kwargs, n, where), "tokens": n,
            "gate_second": swap, "centred_input": _same(x - x.mean(-1, keepdim=True), x)}


def _self_attention(att: nn.Module, args: tuple, kwargs: dict, where: str) -> None:
    """Refuse an `nn.MultiheadAttention` whose keys or values are not its queries."""
    if not isinstance(att, nn.MultiheadAttention):
        return
    qkv = [*args[:3], *(kwargs[k] for k in ("query", "key", "value") if k in kwargs)]
    if len(qkv) != 3 or not all(t is qkv[0] or torch.equal(t, qkv[0]) for t in qkv[1:]):
        raise _fail(where, "the attention's keys or values are not its queries (cross-attention "
                    "is not read)")


def _norm_fields(norms: Sequence[nn.Module], where: str) -> dict[str, Any]:
    """The norms' class, centring and eps, all equal, with unit weight and zero bias."""
    kinds = {type(m).__name__ for m in norms}
    if not kinds:
        raise _fail(where, "no norm found (a block without norms is not read)")
    if len(kinds) != 1:
        raise _fail(where, f"norms of different classes ({', '.join(sorted(kinds))}) are not read")
    m = norms[0]
    for n in norms:
        w, b = getattr(n, "weight", None), getattr(n, "bias", None)
        if (w is not None and not bool((w == 1).all())) or (b is not None and bool((b != 0).any())):
            raise _fail(where, f"{type(n).__name__} with a weight other than 1 or a bias other than "
                        "0 at init is not read")
    eps = _eps(m)
    if eps is None:  # nn.RMSNorm's default
        eps = torch.finfo(torch.get_default_dtype()).eps
    if len({_eps(n) for n in norms}) != 1:
        raise _fail(where, "norms with different eps are not read")
    return {"norm_kind": type(m).__name__, "centred": isinstance(m, nn.LayerNorm), "eps": float(eps)}


def _eps(norm: nn.Module) -> float | None:
    """A norm's eps (`variance_epsilon` for HuggingFace's RMS norms; None: the dtype's)."""
    return getattr(norm, "eps", getattr(norm, "variance_epsilon", None))


def read_network(make: Callable[[int], nn.Module], sample: torch.Tensor | Callable[[nn.Module], Any],
                 seeds: Sequence[int] = (0, 1, 2), blocks: str | None = None) -> NetworkRead:
    """Read the residual blocks of the network `make(seed)` (module docstring).

    Args:
        make: the factory; called under torch's global generator seeded with each seed.
        sample: an input the network takes (`model(sample)`: token ids, images, embeddings), or a
            function `model -> output` that runs it; the wiring is read from this pass.
        seeds: the draws the variances are read from (at least one).
        blocks: attribute path of the blocks' list, or None to find it.

    Returns:
        The `NetworkRead`.

    Raises:
        IntrospectionError: a block or part that is not read, named.
    """
    seeds = tuple(_check_int("seed", s, 0) for s in seeds)
    if not seeds:
        raise IntrospectionError("seeds must hold at least one seed")
    raw: list[list[dict[str, tuple[float, float, int, float]]]] = []
    layouts: list[dict[str, Any]] = []
    cls = ""
    for j, seed in enumerate(seeds):
        model = draw(make, seed)
        cls = type(model).__name__
        bl = find_blocks(model, blocks)
        where = [f"block {i} ({type(b).__name__})" for i, b in enumerate(bl)]
        parts = [_parts(b, w) for b, w in zip(bl, where, strict=True)]
        weights = [_block_weights(p, w) for p, w in zip(parts, where, strict=True)]
        _distinct([ws for _, _, ws in weights], where)
        raw.append([{k: _raw_moment(ws.get(k)) for k in _WEIGHTS} for _, _, ws in weights])
        if j == 0:
            layouts = _probe(model, bl, parts, where, sample)
            for lay, p, w, (d, heads, ws) in zip(layouts, parts, where, weights, strict=True):
                w1 = ws["1"]
                lay.update(_norm_fields(p.norms, w), d=d, heads=heads,
                           attention=type(p.attention).__name__,
                           width=0 if w1 is None else int(w1.shape[0]))
        elif len(bl) != len(layouts):
            raise IntrospectionError(f"{cls}: {len(bl)} blocks at seed {seed}, {len(layouts)} at "
                                     f"seed {seeds[0]}")
    out = []
    for i, lay in enumerate(layouts):
        if lay["gate_second"]:  # the gate is the gated MLP's second projection: '1' is the gate's
            for r in raw:
                r[i]["1"], r[i]["3"], r[i]["b1"], r[i]["b3"] = (r[i]["3"], r[i]["1"], r[i]["b3"],
                                                                r[i]["b1"])
        moments = {k: _moment([r[i][k] for r in raw]) for k in _WEIGHTS}
        fields_ = {k: v for k, v in lay.items() if k not in ("tokens", "gate_second",
                                                             "centred_input")}
        out.append(BlockRead(index=i, moments=moments, **fields_))
    return NetworkRead(cls, tuple(out), layouts[0]["tokens"], seeds,
                       layouts[0]["centred_input"])


def _distinct(weights: Sequence[dict[str, torch.Tensor | None]], where: Sequence[str]) -> None:
    """Refuse blocks that start with equal value weights (copies of one block, as torch's
    nn.TransformerEncoder makes): their weights are not independent over depth."""
    for i in range(1, len(weights)):
        a, b = weights[i - 1]["v"], weights[i]["v"]
        if a is not None and b is not None and torch.equal(a, b) and bool(a.any()):
            raise _fail(where[i], f"starts with the value weights of block {i - 1} (copies of one "
                        "block, as torch's nn.TransformerEncoder makes, are not independent over "
                        "depth: initialise each block on its own)")


def _probe(model: nn.Module, bl: Sequence[nn.Module], parts: Sequence[_Parts], where: Sequence[str],
           sample: torch.Tensor | Callable[[nn.Module], Any]) -> list[dict[str, Any]]:
    """One forward pass of `sample` with hooks (grad enabled, so that torch's fused fast paths,
    which skip the submodules, are not taken); the layout of every block."""
    records, handles = _hook_all(bl, parts)
    try:
        with torch.enable_grad():
            model(sample) if isinstance(sample, torch.Tensor) else sample(model)
    finally:
        for h in handles:
            h.remove()
    out = []
    for b, p, rec, w in zip(bl, parts, records, where, strict=True):
        lay = _layout(b, p, rec, w)
        lay["cls"] = type(b).__name__
        out.append(lay)
    return out


def _moment(per_seed: Sequence[tuple[float, float, int, float]]) -> Moment:
    """Average of per-seed (m2, se, entries, m4) into a `Moment`."""
    S = len(per_seed)
    m2 = [p[0] for p in per_seed]
    value = sum(m2) / S
    sd = math.sqrt(sum((v - value) ** 2 for v in m2) / (S - 1)) if S > 1 else 0.0
    m4 = sum(p[3] for p in per_seed) / S
    return Moment(value, math.sqrt(sum(p[1] ** 2 for p in per_seed)) / S, sd, S, per_seed[0][2],
                  m4 / value ** 2 if value > 0 else math.nan)


# ---------------------------------------------------------------------------------------------
# the law and the mapping


def _uniform(read: NetworkRead) -> None:
    """Refuse a network whose blocks differ in structure or (beyond HOMOGENEITY_Z) in law."""
    first = read.blocks[0]
    for b in read.blocks[1:]:
        if b.structure() != first.structure():
            diff = [f.name for f in fields(BlockRead) if f.name not in ("index", "moments",
                                                                          "residual_scale")
                    and getattr(b, f.name) != getattr(first, f.name)]
            raise IntrospectionError(f"block {b.index} ({b.cls}) differs from block 0 in "
                                     f"{', '.join(diff)}: tokensde's model has one block for all layers")
        for x, y in zip(b.residual_scale, first.residual_scale, strict=True):
            if abs(x - y) > 1e-5 * max(abs(x), abs(y)):
                raise IntrospectionError(f"block {b.index} ({b.cls}): residual scale "
                                         f"{b.residual_scale} differs from block 0's {first.residual_scale}")
    for k in _WEIGHTS:
        pool = read.pooled(k)
        for b in read.blocks:
            m = b.moments[k]
            tol = _HOMOGENEITY_Z * math.hypot(m.se, pool.se) + 1e-6 * pool.value
            if abs(m.value - pool.value) > tol:
                raise IntrospectionError(
                    f"block {b.index} ({b.cls}): entry variance of {k} {m.value:.4g} +- {m.se:.2g} "
                    f"against {pool.value:.4g} over the blocks: blocks with different laws are not read")


def effective(read: NetworkRead) -> dict[str, Moment]:
    """The pooled moments with the residual scales folded in: `o` times `a^2`; `2`, `b2` times
    `b^2`."""
    a, b = read.blocks[0].residual_scale
    out = {k: read.pooled(k) for k in _WEIGHTS}
    for k, c in (("o", a * a), ("2", b * b), ("b2", b * b)):
        m = out[k]
        out[k] = replace(m, value=m.value * c, se=m.se * c, sd=m.sd * c)
    return out


def to_law(read: NetworkRead, radius2: float = 1.0, tokens: int | None = None,
           depth_scaled: bool = False) -> BlockLaw:
    """The `BlockLaw` of a read network (its blocks checked to share one law).

    Args:
        read: the network as read.
        radius2: r0^2, the per-coordinate second moment of the residual stream at the embeddings
            (measure it: `experiment.run_real` takes it from the embeddings).
        tokens: n (default: the sample's).
        depth_scaled: the branches' variances scale as 1/L (as GPT-2's init): the mapped curve then
            has a depth limit. One network at one depth cannot show it: say so here.

    Returns:
        The block law, with the pieces read approximately in its notes.

    Raises:
        IntrospectionError: blocks that differ, or a part the mapping has no term for.
    """
    _uniform(read)
    b0 = read.blocks[0]
    e = effective(read)
    if any(e[k].value > 0 for k in ("bq", "bk", "bv", "bo")):
        raise IntrospectionError(f"block 0 ({b0.cls}): attention biases nonzero at init are not "
                                 "mapped yet")
    act = b0.activation
    mlp_on = act != "none" and e["2"].value > 0  # a zero output weight leaves the output bias alone
    if act == "swiglu" and mlp_on and (e["b1"].value > 0 or e["b3"].value > 0):
        raise IntrospectionError(f"block 0 ({b0.cls}): biases of a gated MLP's gate or input "
                                 "projection nonzero at init are not mapped yet")
    notes = ["W_O W_V product as Gaussian"]
    if b0.attention == "LlamaAttention":
        notes.append("rotary position embeddings not modelled")
    if act == "gelu-tanh" and mlp_on:
        notes.append("tanh GELU as exact GELU")
    if b0.centred and b0.norm == "pre":
        notes.append("LayerNorm centring as RMS")
    elif b0.centred and not read.centred_input:  # post: centred from the first add on
        notes.append("the first block's branch reads the uncentred embeddings as centred")
    odd = sorted(k for k, m in e.items() if m.kurtosis < 2.5 or m.kurtosis > 3.5)
    if odd:
        notes.append("non-Gaussian entries as Gaussian (kurtosis " + ", ".join(
            f"{k} {e[k].kurtosis:.2f}" for k in odd) + ")")
    return BlockLaw(b0.d, b0.heads, read.layers, read.tokens if tokens is None else tokens,
                    b0.causal, b0.norm, e["q"].value, e["k"].value, e["v"].value, e["o"].value,
                    ("gelu" if act.startswith("gelu") else act) if mlp_on else "none", b0.width,
                    e["1"].value, e["2"].value, b0.eps, radius2, notes=tuple(notes),
                    depth_scaled=depth_scaled, var_b1=e["b1"].value if mlp_on else 0.0,
                    var_b2=e["b2"].value, centred=b0.centred,
                    var_3=e["3"].value if mlp_on and act == "swiglu" else 0.0)


def map_read(read: NetworkRead, radius2: float = 1.0, tokens: int | None = None,
             depth_scaled: bool = False) -> Mapping:
    """The tokensde model of a read network: `mapping.to_model(to_law(...))`.

    Args:
        read: What `read_network` read.
        radius2: The squared RMS radius of the stream, as `to_law`.
        tokens: The number of tokens, as `to_law`.
        depth_scaled: Whether the branches carry a depth scale, as `to_law`.

    Returns:
        The `Mapping` (the `ModelParams`, the start and what is approximated).
    """
    return to_model(to_law(read, radius2, tokens, depth_scaled))


_LAW_FIELDS: dict[str, str] = {"q": "var_q", "k": "var_k", "v": "var_v", "o": "var_o", "1": "var_1",
                              "2": "var_2", "b1": "var_b1", "b2": "var_b2", "3": "var_3"}
_PARAM_FIELDS: tuple[str, ...] = ("sigma", "qk_scale", "mlp_sigma", "bias_sigma", "mlp_bias")


def params_errors(read: NetworkRead, radius2: float = 1.0) -> dict[str, float]:
    """Standard errors of the mapped continuous parameters (PARAM_FIELDS, and `mlp_q`, GELU's
    pre-activation variance `d s var_1`), from those of the variances (first order, independent
    weights: each variance moved by its standard error)."""
    law = to_law(read, radius2)
    base = to_model(law).params
    e = effective(read)
    acc = dict.fromkeys((*_PARAM_FIELDS, "mlp_q"), 0.0)
    for key, name in _LAW_FIELDS.items():
        if e[key].se == 0 or getattr(law, name) == 0:
            continue
        moved = replace(law, **{name: getattr(law, name) + e[key].se})
        p = to_model(moved).params
        for f in _PARAM_FIELDS:
            acc[f] += (getattr(p, f) - getattr(base, f)) ** 2
        if key == "1":
            acc["mlp_q"] += (law.d * law.shrink * e[key].se) ** 2
    return {k: math.sqrt(v) for k, v in acc.items()}


# ---------------------------------------------------------------------------------------------
# an experiment on a read network


def block_states(model: nn.Module, blocks: Sequence[nn.Module], x: Any) -> torch.Tensor:
    """`(batch, L + 1, n, d)`: the first block's input and every block's output on `model(x)`
    (no gradients; an `nn.MultiheadAttention` with batch_first False reads `(n, batch, d)`)."""
    states: list[torch.Tensor] = []

    def keep(_m: nn.Module, args: tuple, kwargs: dict, out: Any) -> None:
        if not states:
            states.append((args[0] if args else next(iter(kwargs.values()))).detach())
        states.append((out[0] if isinstance(out, tuple) else out).detach())

    handles = [b.register_forward_hook(keep, with_kwargs=True) for b in blocks]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    h = torch.stack(states, 1)
    att = _parts(blocks[0], f"block 0 ({type(blocks[0]).__name__})").attention
    return h.permute(2, 1, 0, 3) if not getattr(att, "batch_first", True) else h


def _measure_own(make: Callable[[int], nn.Module], inputs: Callable[[int, int], torch.Tensor],
                inits: int, per_init: int, seed: int, blocks: str | None = None,
                tol: float = _TOL, progress: Callable[[int], None] | None = None
                ) -> tuple[dict[str, np.ndarray], torch.Tensor]:
    """Per-init statistics `{stat: (inits, L + 1)}` (each the mean over the init's inputs) and the
    embeddings `(inits * per_init, n, d)`, as `experiment.measure_real`: init s is `make` drawn
    under `derive_seed(seed, 1, s)` reading `inputs(per_init, derive_seed(seed, 2, s))` (a batch
    of inputs; the blocks' tokens `(batch, n, d)`, or `(n, batch, d)` for an
    `nn.MultiheadAttention` with batch_first False)."""
    per: dict[str, list[np.ndarray]] = {}
    x0 = []
    for s in range(inits):
        model = draw(make, derive_seed(seed, 1, s))
        bl = find_blocks(model, blocks)
        h = block_states(model, bl, inputs(per_init, derive_seed(seed, 2, s)))
        for k, v in gram_stats(directions_gram(h), tol).items():
            per.setdefault(k, []).append(v.mean(0))
        x0.append(h[:, 0].to(torch.float64))
        if progress is not None:
            progress(1)
    return {k: np.stack(v) for k, v in per.items()}, torch.cat(x0)


def run_own(make: Callable[[int], nn.Module], inputs: Callable[[int, int], torch.Tensor],
            inits: int = 32, per_init: int = 2, seed: int = 0, blocks: str | None = None,
            depth_scaled: bool = False, read_seeds: int = 3, tol: float = _TOL,
            sde: bool | None = None, sde_steps: int = _SDE_STEPS, sde_runs: int = _SDE_RUNS,
            progress: Callable[[int], None] | None = None) -> RealRun:
    """`experiment.run_real` for a user's network: measure `inits` x `per_init` runs of `make`,
    read its law from its first `read_seeds` inits (`read_network`), map it with the measured r0^2
    (`map_read`) and predict it from the same embeddings.

    Args:
        make: the factory `seed -> nn.Module`.
        inputs: `(batch, seed) -> ` a batch of inputs the network takes.
        inits: independent initialisations (>= 2).
        per_init: inputs per initialisation.
        seed: root seed (inits, inputs, predictions as in `run_real`).
        blocks: attribute path of the blocks' list, or None to find it.
        depth_scaled: the branches' variances scale as 1/L (`to_law`).
        read_seeds: inits the variances are read from.
        tol: the clustering tolerance of the statistics.
        sde: also draw the depth limit (default: when `depth_scaled` and the MLP has no hidden
            bias, which the limit does not carry).
        sde_steps: Euler steps of the depth limit.
        sde_runs: embeddings the depth limit starts from.
        progress: called with the number of inits measured, or None.

    Returns:
        A `RealRun` (its meta names the network class and the read law instead of a RealSpec).
    """
    inits, per_init = _check_int("inits", inits, 2), _check_int("inputs", per_init, 1)
    seed, read_seeds = _check_int("seed", seed, 0), _check_int("read_seeds", read_seeds, 1)
    _require(0 < tol < 1, "tol", "in (0, 1)", tol)
    t0 = time.perf_counter()
    sde_steps, sde_runs = _check_int("sde_steps", sde_steps, 1), _check_int("sde_runs", sde_runs, 2)
    per, x0 = _measure_own(make, inputs, inits, per_init, seed, blocks, tol, progress)
    read = read_network(make, inputs(per_init, derive_seed(seed, 2, 0)),
                        [derive_seed(seed, 1, s) for s in range(min(read_seeds, inits))], blocks)
    t_real = time.perf_counter() - t0
    radius2 = float((x0 ** 2).sum(-1).mean()) / x0.shape[-1]
    m = map_read(read, radius2, depth_scaled=depth_scaled)
    use_sde = depth_scaled and m.params.mlp_bias == 0 if sde is None else sde
    meta = {"network": read.cls, "block": read.blocks[0].cls, "layers": read.layers,
            "inits": inits, "inputs": per_init, "seed": seed, "read_seeds": list(read.seeds),
            "residual_scale": list(read.blocks[0].residual_scale)}
    return predicted_run(per, x0, m, read.layers, seed, tol, use_sde, sde_steps, sde_runs,
                         t_real, meta)


# ---------------------------------------------------------------------------------------------
# a network given as a file (tokensde real module FILE:FUNC)


def load_factory(target: str, name: str = "factory"
                 ) -> tuple[Callable[[int], nn.Module], Callable[[int, int], torch.Tensor] | None]:
    """The factory `FUNC` of `FILE:FUNC` (`FILE` alone: `make`) and the file's
    `inputs(batch, seed)`, or None where it defines none. The file is imported from its path:
    its code runs, as any import does.

    Args:
        target: `path/to/file.py:make`.
        name: what the errors call `target` (the command line's argument or option).

    Returns:
        (make, inputs or None).

    Raises:
        IntrospectionError: no such file, not a .py file, an import that fails, a missing or
            uncallable function; the message starts with `name` and `target`.
    """
    import importlib.util
    import sys
    from pathlib import Path

    path_s, sep, func = target.rpartition(":")
    if not sep or not func.isidentifier():  # no ':FUNC' (or a Windows drive's ':')
        path_s, func = target, "make"
    path = Path(path_s).expanduser()
    where = f"{name} {target}"
    if path.suffix != ".py":
        raise IntrospectionError(f"{where}: give a Python file and the function in it, FILE.py:FUNC")
    if not path.is_file():
        raise IntrospectionError(f"{where}: no file {path}")
    mod_name = f"_tokensde_own_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise IntrospectionError(f"{where}: {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # for the dataclasses and pickles the file defines
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the user's code: any error it raises is reported, not a traceback
        sys.modules.pop(mod_name, None)
        raise IntrospectionError(f"{where}: importing {path} raised {type(err).__name__}: "
                                 f"{err}") from err
    make = getattr(module, func, None)
    if not callable(make):
        have = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                      and getattr(v, "__module__", None) == mod_name)
        raise IntrospectionError(f"{where}: {path} defines no function {func}(seed) (it defines "
                                 f"{', '.join(have) or 'none'})")
    inputs = getattr(module, "inputs", None)
    if inputs is not None and not callable(inputs):
        raise IntrospectionError(f"{where}: 'inputs' in {path} is not a function inputs(batch, seed)")
    return make, inputs


def gaussian_inputs(tokens: int, width: int) -> Callable[[int, int], torch.Tensor]:
    """`(batch, seed) -> ` tokens `(batch, tokens, width)` with i.i.d. standard normal entries
    (per-coordinate variance 1), drawn by a generator seeded with `seed`: the input of a network
    whose forward takes embeddings."""
    tokens, width = _check_int("tokens", tokens, 1), _check_int("width", width, 1)

    def inputs(batch: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randn(batch, tokens, width, generator=g)

    return inputs


def network_width(model: nn.Module, blocks: str | None = None) -> int:
    """The width d of the first residual block's attention of `model`."""
    first = find_blocks(model, blocks)[0]
    where = f"block 0 ({type(first).__name__})"
    return _attention_weights(_parts(first, where), where)[0]


def own_budget(read: NetworkRead, parameters: int, inits: int, per_init: int,
               sde_steps: int = _SDE_STEPS, sde_runs: int = _SDE_RUNS, sde: bool = True) -> Budget:
    """Memory and work of `run_own` on the network `read` (`parameters` numbers), as
    `experiment.real_budget` for a family: one model's float32 parameters and one init's hidden
    states, per init its inputs' float64 tokens and Gram matrices; the forward passes `inits x
    per_init x L x n x d x (n + 4 d + k m)` (k = 2 MLP matrices, 3 gated), the predictions' work
    and layer steps (`experiment.real_run_cost`; the depth limit's with `sde`, as `run_own`
    draws it only for a depth-scaled network)."""
    inits, per_init = _check_int("inits", inits, 2), _check_int("inputs", per_init, 1)
    b, L, n = read.blocks[0], read.layers, read.tokens
    d, heads, m = b.d, b.heads, b.width
    mats = 3 if b.activation == "swiglu" else 2 if m else 0
    fixed = 4 * (parameters + per_init * (L + 1) * n * d)
    per = 8 * per_init * (n * d + (L + 1) * n * n)
    runs = inits * per_init
    work, steps = real_run_cost(inits, per_init, L, n, d, heads, True, sde_steps, sde_runs,
                                sde=sde)
    return Budget(f"this {read.cls} run", fixed + per * inits, per, inits,
                  float(runs) * L * n * d * (n + 4 * d + mats * m) + work,
                  f"{inits} inits x {per_init} inputs, {L} layers, width {d}, {n} tokens, "
                  f"{parameters} parameters", ("inits", "inputs"),
                  longer=("inits", "inputs", "sde_steps", "sde_runs"),
                  steps=steps)


def prepare_own(target: str, tokens: int | None, per_init: int, seed: int,
                blocks: str | None = None, names: tuple[str, str] = ("factory", "tokens")
                ) -> tuple[Callable[[int], nn.Module], Callable[[int, int], torch.Tensor],
                           NetworkRead, int]:
    """A network given as `FILE.py:FUNC`, checked before a run: its factory (`load_factory`), its
    inputs (the file's `inputs(batch, seed)`, or `gaussian_inputs` of `tokens` tokens at the
    network's width: one of the two), its read at the first init of `run_own(..., seed)` and its
    number of parameters.

    Args:
        target: `path/to/file.py:make`.
        tokens: tokens of the Gaussian inputs, None where the file defines `inputs`.
        per_init: inputs per init (the batch the read's forward pass takes).
        seed: the root seed of the run (`run_own`'s).
        blocks: attribute path of the blocks' list, or None to find it.
        names: what the errors call `target` and `tokens` (the command line's names).

    Returns:
        (make, inputs, the `NetworkRead` of one init, the number of parameters).

    Raises:
        IntrospectionError: a bad file or function, inputs given twice or not at all, a network
            that is not read; any error of the user's code while it is drawn and run, in one
            line naming `names[0]`.
    """
    what, tok = names
    make, feed = load_factory(target, what)
    if (feed is None) == (tokens is None):
        raise IntrospectionError(
            f"{tok}: {target} defines inputs(batch, seed), which sets the tokens; drop {tok}"
            if feed is not None else f"{tok}: {target} defines no inputs(batch, seed); give "
            f"{tok}, the tokens of the Gaussian inputs")
    s0 = derive_seed(_check_int("seed", seed, 0), 1, 0)
    try:
        model = draw(make, s0)
        if feed is None:
            feed = gaussian_inputs(_check_int(tok, tokens, 1), network_width(model, blocks))
        read = read_network(make, feed(_check_int("inputs", per_init, 1), derive_seed(seed, 2, 0)),
                            (s0,), blocks)
    except ParameterError:
        raise
    except Exception as err:  # the user's code: reported in one line, not as a traceback
        raise IntrospectionError(f"{what} {target}: reading the network raised "
                                 f"{type(err).__name__}: {err}") from err
    return make, feed, read, sum(p.numel() for p in model.parameters())
