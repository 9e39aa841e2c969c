"""Real Transformers at initialisation, built offline from configuration objects (no weights, no
tokenizer, eval mode, dropout off), and their hidden states at every layer.

`RealSpec` names an architecture and its size; `build(spec, seed)` returns a `RealNet` (the module,
its blocks, the embedding); `make_inputs` draws what the network reads (token ids uniform over the
vocabulary, or Fashion-MNIST test images for ViT); `hidden_states(net, inputs)` is
`(inputs, layers + 1, n, d)`: the embeddings (the blocks' input) and each block's output.

The switches `centring`, `qk`, `mlp`, `bias`, `residual_scaling` and `value_scale` change one piece
of the real network at its init (docs/real.md): the measured effect of a piece that the mapping
approximates is the difference they make, with the same change made on the tokensde side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from ..model.checks import ParameterError, _check_choice, _check_int, _check_real, _require
from ..model.params import _MAX_SIZE

__all__ = [
    "ARCHS", "INSTALL_HINT", "MissingExtraError", "RMSNorm", "RealNet", "RealSpec", "build",
    "has_transformers", "hidden_states", "llama_config", "make_inputs", "require_transformers",
]

ARCHS: tuple[str, ...] = ("gpt2", "bert", "vit", "torch-encoder", "llama")
INSTALL_HINT = 'the real-network models need HuggingFace transformers: pip install "tokensde[real]"'
_IMAGE_SIDE = 28  # Fashion-MNIST
_MAX_VALUE_SCALE = 1e3  # value_scale above: the value path's entries overflow LayerNorm's float32


class MissingExtraError(ImportError):
    """The optional extra `[real]` (HuggingFace transformers) is not installed."""


def require_transformers() -> Any:
    """The `transformers` module, or an error saying how to install it.

    Returns:
        The imported `transformers` module.

    Raises:
        MissingExtraError: the `[real]` extra is not installed.
    """
    try:
        import transformers
    except ImportError as err:
        raise MissingExtraError(INSTALL_HINT) from err
    return transformers


def has_transformers() -> bool:
    """Whether the `[real]` extra (HuggingFace `transformers`) is installed.

    Returns:
        True when `transformers` imports.
    """
    try:
        require_transformers()
    except MissingExtraError:
        return False
    return True


@dataclass(frozen=True)
class RealSpec:
    """A real architecture at init: `arch` (ARCHS), `layers`, `width` (d_model), `heads`, `ctx`
    (tokens per input; ViT: set by `patch`, n = (28/patch)^2 + 1), `vocab` (None: the
    architecture's default), `mlp_ratio` (hidden width / d), `norm_first` (torch-encoder),
    `patch` (ViT). The switches (docs/real.md): `residual_scaling` (GPT-2's 1/sqrt(2 L) on the
    residual projections), `centring` (LayerNorm's mean subtraction; False: RMS), `qk` (False:
    query/key weights zero, uniform attention), `mlp` (False: MLP output weights zero), `bias`
    (torch-encoder's Linear biases), `value_scale` (multiplies the value projection's init),
    `value_law` ('product': each head's value path is W_O^h W_V^h, as built; 'gaussian', GPT-2
    only: a Gaussian d x d matrix of the same entry variance per head and layer, the mapping's law,
    `gaussian_value_path`), `rope` (llama only; False: the rotary embedding at position 0 for
    every token, the identity rotation, the causal mask unchanged: `rope_at_zero`), `mlp_scale`
    (llama only; multiplies the init of the gate and input projections W_1, W_3 of the SwiGLU
    block: gate variance q times its square)."""

    arch: str = "gpt2"
    layers: int = 12
    width: int = 256
    heads: int = 4
    ctx: int = 64
    vocab: int | None = None
    mlp_ratio: int = 4
    norm_first: bool = True
    patch: int = 4
    residual_scaling: bool = True
    centring: bool = True
    qk: bool = True
    mlp: bool = True
    bias: bool = True
    value_scale: float = 1.0
    value_law: str = "product"
    rope: bool = True
    mlp_scale: float = 1.0

    def __post_init__(self) -> None:
        _check_choice("arch", self.arch, ARCHS)
        _check_int("layers", self.layers, 1)
        _check_int("width", self.width, 2)
        _check_int("heads", self.heads, 1)
        _require(self.width % self.heads == 0, "heads", f"a divisor of width = {self.width}",
                self.heads)
        _check_int("ctx", self.ctx, 2)
        if self.vocab is not None:
            _check_int("vocab", self.vocab, 2, _MAX_SIZE)
        _check_int("mlp_ratio", self.mlp_ratio, 1)
        _check_int("patch", self.patch, 1)
        _require(_IMAGE_SIDE % self.patch == 0, "patch", f"a divisor of {_IMAGE_SIDE}", self.patch)
        _check_real("value_scale", self.value_scale, 0.0, strict=True)
        _require(self.value_scale <= _MAX_VALUE_SCALE, "value_scale",
                f"a finite number in (0, {_MAX_VALUE_SCALE:g}]", self.value_scale)
        _require(self.residual_scaling or self.arch == "gpt2", "residual_scaling",
                "True except for gpt2 (only GPT-2 scales its residual projections)",
                self.residual_scaling)
        _require(self.bias or self.arch == "torch-encoder", "bias", "True except for "
                "torch-encoder (the HuggingFace models' biases are zero at init)", self.bias)
        _require(self.norm_first or self.arch == "torch-encoder", "norm_first", "True except "
                "for torch-encoder (the others place their norms as built)", self.norm_first)
        _require(self.centring or self.arch != "llama", "centring", "True for llama (its norms "
                "are RMSNorms: there is no centring to remove)", self.centring)
        _require(self.rope or self.arch == "llama", "rope", "True except for llama (the only "
                "architecture with rotary position embeddings)", self.rope)
        _check_real("mlp_scale", self.mlp_scale, 0.0, strict=True)
        _require(self.mlp_scale <= _MAX_VALUE_SCALE and (self.mlp_scale == 1.0
                                                       or self.arch == "llama"), "mlp_scale",
                f"1 except for llama, where a finite number in (0, {_MAX_VALUE_SCALE:g}]",
                self.mlp_scale)
        _check_choice("value_law", self.value_law, ("product", "gaussian"))
        _require(self.value_law == "product" or self.arch == "gpt2", "value_law",
                "'product' except for gpt2 (the Gaussian value path is built for GPT-2 only)",
                self.value_law)

    @property
    def tokens(self) -> int:
        """Tokens per input `n`."""
        return (_IMAGE_SIDE // self.patch) ** 2 + 1 if self.arch == "vit" else self.ctx

    @property
    def vocabulary(self) -> int:
        """The vocabulary size used (the architecture's default when `vocab` is None)."""
        if self.vocab is not None:
            return self.vocab
        return {"gpt2": 50257, "bert": 30522, "llama": 32000}.get(self.arch, 1024)

    @property
    def causal(self) -> bool:
        """True for the decoders GPT-2 and Llama (causal self-attention)."""
        return self.arch in ("gpt2", "llama")

    @property
    def depth_scaled(self) -> bool:
        """True when the residual branches' variances scale like 1/L (GPT-2's residual scaling):
        only then has the mapped model a depth limit, the SDE `run_real` draws by default."""
        return self.arch == "gpt2" and self.residual_scaling

    @property
    def pre_norm(self) -> bool:
        """True when each branch reads a norm of the residual stream (GPT-2, ViT, Llama, torch's
        encoder with norm_first)."""
        return self.arch in ("gpt2", "vit", "llama") or (self.arch == "torch-encoder" and self.norm_first)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields, with the vocabulary and token count used."""
        return {**asdict(self), "vocab": self.vocabulary, "tokens": self.tokens}


class RMSNorm(nn.Module):
    """LayerNorm without the centring: `x / sqrt(mean(x^2) + eps) * weight + bias`."""

    def __init__(self, ln: nn.LayerNorm) -> None:
        super().__init__()
        self.eps = ln.eps
        self.weight = ln.weight
        self.bias = ln.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last axis by its root mean square."""
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y if self.bias is None else y + self.bias


def _uncentre(module: nn.Module) -> int:
    """Replace every `nn.LayerNorm` inside `module` by `RMSNorm`; returns how many."""
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.LayerNorm):
            setattr(module, name, RMSNorm(child))
            count += 1
        else:
            count += _uncentre(child)
    return count


@dataclass
class RealNet:
    """A built network: `model` (eval mode), `blocks` (the residual blocks, in order), `run`
    (inputs -> hidden states `(batch, layers + 1, n, d)`), the spec and the init seed."""

    model: nn.Module
    blocks: list[nn.Module]
    run: Callable[[torch.Tensor], torch.Tensor]
    spec: RealSpec
    seed: int


def _hooked_run(model: nn.Module, blocks: list[nn.Module],
                call: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A run function that records the first block's input and every block's output."""
    def run(inputs: torch.Tensor) -> torch.Tensor:
        states: list[torch.Tensor] = []

        def pre(_m: nn.Module, args: tuple, kwargs: dict) -> None:
            states.append(args[0] if args else kwargs["hidden_states"])

        def post(_m: nn.Module, _a: tuple, out: Any) -> None:
            states.append(out[0] if isinstance(out, tuple) else out)

        handles = [blocks[0].register_forward_pre_hook(pre, with_kwargs=True)]
        handles += [b.register_forward_hook(post) for b in blocks]
        try:
            with torch.no_grad():
                call(inputs)
        finally:
            for h in handles:
                h.remove()
        return torch.stack([s.detach() for s in states], 1)
    return run


def _switch(spec: RealSpec, parts: Sequence[tuple[torch.Tensor, ...]]) -> None:
    """Apply `value_scale`, `qk` and `mlp` of `spec` to each block's (query, key, value, MLP
    output) weights, given as views into the parameters."""
    with torch.no_grad():
        for q, k, v, out in parts:
            v.mul_(spec.value_scale)
            if not spec.qk:
                q.zero_()
                k.zero_()
            if not spec.mlp:
                out.zero_()


def _gpt2(spec: RealSpec) -> tuple[nn.Module, list[nn.Module], Callable[[torch.Tensor], Any]]:
    tf = require_transformers()
    d, L = spec.width, spec.layers
    cfg = tf.GPT2Config(n_embd=d, n_layer=L, n_head=spec.heads, n_positions=spec.ctx,
                        vocab_size=spec.vocabulary, n_inner=spec.mlp_ratio * d, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    model = tf.GPT2Model(cfg).eval()
    sd = cfg.initializer_range
    blocks = list(model.h)
    with torch.no_grad():
        for b in blocks:
            if not spec.residual_scaling:  # the what-if: GPT-2 without 1/sqrt(2 L)
                b.attn.c_proj.weight.normal_(0.0, sd)
                b.mlp.c_proj.weight.normal_(0.0, sd)
    _switch(spec, [(*b.attn.c_attn.weight.split(d, 1), b.mlp.c_proj.weight)  # Conv1D (d, 3d)
                  for b in blocks])
    if spec.value_law == "gaussian":
        dh = d // spec.heads
        var_o = sd ** 2 / (2 * L) if spec.residual_scaling else sd ** 2
        entry_sd = math.sqrt(dh * var_o * (sd * spec.value_scale) ** 2)
        for b in blocks:
            _gaussian_value_path(b.attn, entry_sd * torch.randn(spec.heads, d, d), causal=True)
    return model, blocks, lambda ids: model(input_ids=ids)


def _head_products(attn: Any, heads: int) -> torch.Tensor:
    """`(heads, d, d)`: each head's value path `W_O^h W_V^h` of a GPT-2 attention (Conv1D weights
    act as `u @ W`, so the matrix acting on a column token is the transpose)."""
    d = attn.c_proj.weight.shape[0]
    dh = d // heads
    wv = attn.c_attn.weight[:, 2 * d:]  # (d_in, d): v = u @ wv
    wo = attn.c_proj.weight  # (d, d_out): out = z @ wo
    with torch.no_grad():
        return torch.stack([(wv[:, h * dh:(h + 1) * dh] @ wo[h * dh:(h + 1) * dh]).T
                            for h in range(heads)])


def _gaussian_value_path(attn: Any, g: torch.Tensor, causal: bool) -> Any:
    """Make a GPT-2 attention module output `sum_h A_h u G_h^T + b_O` (its own softmax attention
    `A_h` of scaled, masked logits, the value path replaced by `g` `(heads, d, d)`), by a forward
    hook; returns the hook's handle. With `g = head_products(attn, heads)` it is the module's own
    output (tests/test_real_value.py)."""
    heads, d = g.shape[0], g.shape[1]
    dh = d // heads

    def hook(module: Any, args: tuple, kwargs: dict, out: Any) -> Any:
        u = args[0] if args else kwargs["hidden_states"]
        q, k, _ = module.c_attn(u).split(d, 2)
        q = q.view(*u.shape[:-1], heads, dh).transpose(-3, -2)
        k = k.view(*u.shape[:-1], heads, dh).transpose(-3, -2)
        logits = q @ k.transpose(-1, -2) / math.sqrt(dh)
        if causal:
            n = u.shape[-2]
            upper = torch.ones(n, n, dtype=torch.bool, device=u.device).triu(1)
            logits = logits.masked_fill(upper, float("-inf"))
        a = logits.softmax(-1)  # (..., heads, n, n)
        y = torch.einsum("...hij,...jc,hec->...ie", a, u, g.to(u.dtype)) + module.c_proj.bias
        return (y, *out[1:]) if isinstance(out, tuple) else y

    return attn.register_forward_hook(hook, with_kwargs=True)


def _encoder_sizes(spec: RealSpec) -> dict[str, Any]:
    """The size fields BERT's and ViT's configurations share, dropout off."""
    return {"hidden_size": spec.width, "num_hidden_layers": spec.layers,
            "num_attention_heads": spec.heads, "intermediate_size": spec.mlp_ratio * spec.width,
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _bert(spec: RealSpec) -> tuple[nn.Module, list[nn.Module], Callable[[torch.Tensor], Any]]:
    tf = require_transformers()
    cfg = tf.BertConfig(max_position_embeddings=spec.ctx, vocab_size=spec.vocabulary,
                        **_encoder_sizes(spec))
    model = tf.BertModel(cfg, add_pooling_layer=False).eval()
    blocks = list(model.encoder.layer)
    _switch(spec, [(b.attention.self.query.weight, b.attention.self.key.weight,
                   b.attention.self.value.weight, b.output.dense.weight) for b in blocks])
    return model, blocks, lambda ids: model(input_ids=ids)


def _vit(spec: RealSpec) -> tuple[nn.Module, list[nn.Module], Callable[[torch.Tensor], Any]]:
    tf = require_transformers()
    cfg = tf.ViTConfig(image_size=_IMAGE_SIDE, patch_size=spec.patch, num_channels=1,
                       **_encoder_sizes(spec))
    model = tf.ViTModel(cfg, add_pooling_layer=False).eval()
    blocks = list(model.layers if hasattr(model, "layers") else model.encoder.layer)
    parts = []
    for b in blocks:
        att = b.attention
        if hasattr(att, "v_proj"):
            parts.append((att.q_proj.weight, att.k_proj.weight, att.v_proj.weight,
                          b.mlp.fc2.weight))
        else:  # older transformers
            a = att.attention
            parts.append((a.query.weight, a.key.weight, a.value.weight, b.output.dense.weight))
    _switch(spec, parts)
    return model, blocks, lambda x: model(pixel_values=x)


class _TorchEncoder(nn.Module):
    """torch's `nn.TransformerEncoderLayer` stack, each layer initialised on its own (torch's
    `nn.TransformerEncoder` deep-copies one layer, so all its layers START EQUAL: docs/real.md),
    read through a token embedding and learned positions, N(0, 1/2) each (per-coordinate
    variance 1, the radius LayerNorm gives)."""

    def __init__(self, spec: RealSpec) -> None:
        super().__init__()
        d = spec.width
        self.embed = nn.Embedding(spec.vocabulary, d)
        self.pos = nn.Embedding(spec.ctx, d)
        nn.init.normal_(self.embed.weight, 0.0, math.sqrt(0.5))
        nn.init.normal_(self.pos.weight, 0.0, math.sqrt(0.5))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d, spec.heads, spec.mlp_ratio * d, dropout=0.0,
                                       batch_first=True, norm_first=spec.norm_first,
                                       bias=spec.bias) for _ in range(spec.layers))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids `(batch, n)` -> the last layer's output `(batch, n, d)`."""
        h = self.embed(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            h = layer(h)
        return h


def _torch_encoder(spec: RealSpec) -> tuple[nn.Module, list[nn.Module],
                                             Callable[[torch.Tensor], Any]]:
    model = _TorchEncoder(spec).eval()
    blocks: list[Any] = list(model.layers)
    _switch(spec, [(*b.self_attn.in_proj_weight.split(spec.width, 0), b.linear2.weight)
                  for b in blocks])  # rows q|k|v
    return model, blocks, model


def llama_config(spec: RealSpec) -> Any:
    """The `transformers.LlamaConfig` of `spec`: its sizes, one key/value head per query head
    (no grouping), `intermediate_size = mlp_ratio * width`, no padding token, dropout off, the
    library's defaults otherwise (initializer_range 0.02, rms_norm_eps 1e-6, no biases, SiLU)."""
    tf = require_transformers()
    return tf.LlamaConfig(hidden_size=spec.width, intermediate_size=spec.mlp_ratio * spec.width,
                          num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
                          num_key_value_heads=spec.heads, max_position_embeddings=spec.ctx,
                          vocab_size=spec.vocabulary, pad_token_id=None, attention_dropout=0.0)


def _rope_at_zero(model: nn.Module) -> Any:
    """Make `model.rotary_emb` rotate every token as at position 0 (cos 1, sin 0: queries and keys
    unrotated) by a forward pre-hook; returns its handle. The model's own position ids still
    reach the attention mask: all-zero `position_ids` given to the model would instead be read
    as packed one-token sequences and mask every token off from the others."""
    def hook(_m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if len(args) > 1:
            return (args[0], torch.zeros_like(args[1]), *args[2:]), kwargs
        return args, {**kwargs, "position_ids": torch.zeros_like(kwargs["position_ids"])}

    rotary: Any = model.rotary_emb
    return rotary.register_forward_pre_hook(hook, with_kwargs=True)


def _llama(spec: RealSpec) -> tuple[nn.Module, list[nn.Module], Callable[[torch.Tensor], Any]]:
    model = require_transformers().LlamaModel(llama_config(spec)).eval()
    blocks = list(model.layers)
    _switch(spec, [(b.self_attn.q_proj.weight, b.self_attn.k_proj.weight,
                   b.self_attn.v_proj.weight, b.mlp.down_proj.weight) for b in blocks])
    with torch.no_grad():
        for b in blocks:
            b.mlp.gate_proj.weight.mul_(spec.mlp_scale)
            b.mlp.up_proj.weight.mul_(spec.mlp_scale)
    if not spec.rope:
        _rope_at_zero(model)
    return model, blocks, lambda ids: model(input_ids=ids)


_BUILDERS = {"gpt2": _gpt2, "bert": _bert, "vit": _vit, "torch-encoder": _torch_encoder,
            "llama": _llama}


def build(spec: RealSpec, seed: int) -> RealNet:
    """The network of `spec` at its init under torch's global RNG seeded with `seed`.

    The libraries draw their init from that RNG; the network is in eval mode, dropout off, float32
    as the libraries make it.

    Args:
        spec: the architecture and its size.
        seed: the init's seed.

    Returns:
        The `RealNet`.
    """
    seed = _check_int("seed", seed, 0)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model, blocks, call = _BUILDERS[spec.arch](spec)
    finally:
        torch.random.set_rng_state(state)
    if not spec.centring:
        for b in blocks:
            _uncentre(b)
    model.eval()
    return RealNet(model, blocks, _hooked_run(model, blocks, call), spec, seed)


def make_inputs(spec: RealSpec, batch: int, seed: int, images: torch.Tensor | None = None
                ) -> torch.Tensor:
    """`batch` inputs for `spec`: token ids uniform over the vocabulary, or images (ViT).

    Args:
        spec: the architecture.
        batch: number of inputs.
        seed: seed of the draw.
        images: ViT only: images `(N, 1, 28, 28)` drawn without replacement (the caller reads them,
            e.g. the Fashion-MNIST test set by `tokensde.vit.data.load_dataset`).

    Returns:
        Token ids `(batch, ctx)` or images `(batch, 1, 28, 28)`.
    """
    batch = _check_int("inputs", batch, 1)
    gen = torch.Generator().manual_seed(_check_int("seed", seed, 0))
    if spec.arch != "vit":
        return torch.randint(0, spec.vocabulary, (batch, spec.ctx), generator=gen)
    if images is None or images.dim() != 4 or tuple(images.shape[1:]) != (1, _IMAGE_SIDE,
                                                                         _IMAGE_SIDE):
        raise ParameterError(f"images must be a tensor (N, 1, {_IMAGE_SIDE}, {_IMAGE_SIDE}) for "
                             f"arch='vit'; got {None if images is None else tuple(images.shape)}")
    _require(batch <= len(images), "inputs", f"<= the {len(images)} images given", batch)
    pick = torch.randperm(len(images), generator=gen)[:batch]
    return images[pick]


def hidden_states(net: RealNet, inputs: torch.Tensor) -> torch.Tensor:
    """The embeddings and every block's output of `net` on `inputs`.

    Args:
        net: the real network.
        inputs: token ids `(batch, ctx)` or images (`make_inputs`).

    Returns:
        `(batch, layers + 1, n, d)`.
    """
    if len(inputs) == 0:
        raise ParameterError("inputs must hold at least one input")
    return net.run(inputs)
