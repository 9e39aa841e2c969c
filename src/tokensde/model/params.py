"""Validated, immutable model parameters (spec §1-§2) and the depth-time grid.

`ModelParams` says *what* is simulated (tokens, attention, value-matrix law); `TimeGrid` says *how
far* and with which layer step. Both raise `ParameterError` naming the parameter and its range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import numpy as np

from .attention import ATTENTION_KINDS, AttentionKind
from .checks import ParameterError, _check_choice, _check_int, _check_real, _real_array, _require
from .mlp import MLPS, Activation
from .noise import NOISE_LAWS, NoiseLaw
from .qk import QK_LAWS, QKLaw
from .qk.base import QK_SAMPLES

__all__ = ["NORMS", "VALUE_INIT_PRESETS", "ModelParams", "TimeGrid", "ValueInit", "value_init_preset"]

# The built-in names. The fields take any name registered in tokensde.model.attention / tokensde.model.noise
# (a new module adds one), so they are typed `str`; these aliases document the built-in ones.
_Attention = Literal["softmax", "usa"]
_Noise = Literal["matrix", "scalar", "symmetric"]
_Law = Literal["gaussian", "uniform", "rademacher"]
NORMS: tuple[str, ...] = ("post", "pre", "peri")  # where the layer normalises (docs/variants.md §4)
_MLP_WIDTH_FACTOR = 4  # default hidden width of the MLP block: 4 d, as in most Transformers


def _matrix(name: str, value: Any, d: int, heads: int = 1) -> np.ndarray | None:
    if value is None:
        return None
    a = _real_array(name, value)
    shapes = [(d, d)] if heads == 1 else [(d, d), (heads, d, d)]
    allowed = f"a {d}x{d} matrix (d = {d})" + ("" if heads == 1 else
                                               f" or one per head, shape ({heads}, {d}, {d})")
    _require(a.shape in shapes, name, allowed, f"shape {a.shape}")
    _require(bool(np.all(np.isfinite(a))), name, "finite", "non-finite entries")
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class ValueInit:
    """A value-matrix initialisation of a real model: entry law `law`, entry variance `variance(d)`."""

    name: str
    law: str
    variance: Callable[[int], float]
    source: str

    def sigma(self, d: int) -> float:
        """Entry standard deviation `sigma = sqrt(variance(d))`."""
        return math.sqrt(self.variance(_check_int("d", d, 2)))

    def depth_rate(self, d: int) -> float:
        """`sigma^2 d`: depth time of the limit per unit of `T` (docs/variants.md)."""
        return self.variance(_check_int("d", d, 2)) * d


VALUE_INIT_PRESETS: dict[str, ValueInit] = {
    v.name: v for v in (
        ValueInit("pytorch", "uniform", lambda d: 1.0 / (3.0 * d),
                  "torch.nn.Linear default: U(-1/sqrt(d), 1/sqrt(d)), variance 1/(3d)"),
        ValueInit("gpt2", "gaussian", lambda d: 0.02 ** 2, "GPT-2: N(0, 0.02^2)"),
        ValueInit("gaussian", "gaussian", lambda d: 1.0 / d, "N(0, 1/d) (LeCun / Xavier-like)"),
    )
}


def value_init_preset(name: str) -> ValueInit:
    """The value-initialisation preset `name` (`VALUE_INIT_PRESETS`).

    Args:
        name: the preset's name.

    Returns:
        The preset.

    Raises:
        ParameterError: no preset has that name (the message names `value_init`).
    """
    return VALUE_INIT_PRESETS[_check_choice("value_init", name, tuple(VALUE_INIT_PRESETS))]


@dataclass(frozen=True, eq=False)
class ModelParams:
    """Parameters of the deep random-attention network (spec §1-§2).

    `mean` is the deterministic value part `M`: "none" (M = 0, pure noise), "identity" (M = I) or a
    d x d array. `sigma` scales matrix and symmetric noise (entry variance sigma^2); `eps` scales
    scalar noise `V = eps * xi * I` (defaults to `sigma`). `Q`, `K` default to the identity.
    `heads` attention heads (docs/variants.md §2): head h has its own weights from `Q[h]`, `K[h]`
    (arrays `(heads, d, d)`, or one d x d pair shared) and its own value noise of variance
    `sigma^2/heads`; the noises are summed.
    `qk` the law of the query/key form of each head (docs/variants.md §3): 'identity' (`Q^T K` of
    `Q`, `K`) or a random law `A = I + qk_scale R` ('gaussian', 'wigner', 'goe'), drawn once per run
    (`qk_redraw='run'`) or every layer ('layer'); `qk_samples` draws of the law per SDE step with
    'layer'.
    `norm` where the layer normalises (docs/variants.md §4): 'post' (spec §2, tokens on the sphere),
    'pre' (attention sees the normalised residual stream, which keeps its radius) or 'peri' (as
    'pre', and the branch output is normalised too); their SDE schemes are in `sim.norm_sde`.
    `bias_sigma` the output bias of the MLP sublayer (docs/variants.md §5, biases): every layer
    adds `alpha bias_sigma g` to every token, `g` standard normal in R^d, one per layer and run,
    the same for all tokens (with mlp='none' the sublayer is that bias alone); `mlp_bias` the
    hidden bias of the MLP block: each hidden pre-activation `<w_k, u_i>` (standard normal for a
    unit token) gains `mlp_bias c_k`, `c_k` standard normal, one per unit, layer and run. Both 0
    by default (no biases, every earlier run's numbers).
    `token_noise` the strength `tau >= 0` of each token's own noise (docs/token-noise.md): the
    network adds `tau sqrt(dt) g_i` to the residual of token `i`, `g_i` standard normal in R^d,
    independent over tokens, layers and runs; the SDE adds `tau P_x dB_i` and its Ito drift
    `-(d-1)/2 tau^2 x dt`. 0 by default (nothing drawn, every earlier run's numbers).

    Two parameter sets are equal when every field is (arrays `Q`, `K`, `mean` elementwise), so
    `p == p.with_()`; the hash follows the same values, so a `ModelParams` can key a dict.
    """

    n: int = 2
    d: int = 3
    beta: float = 1.0
    attention: str = "softmax"
    causal: bool = False
    Q: np.ndarray | None = None
    K: np.ndarray | None = None
    mean: str | np.ndarray = "none"
    noise: str = "matrix"
    law: str = "gaussian"
    sigma: float = 1.0
    eps: float | None = None
    heads: int = 1
    qk: str = "identity"
    qk_scale: float = 1.0
    qk_redraw: str = "run"
    qk_samples: int = QK_SAMPLES
    norm: str = "post"
    mlp: str = "none"
    mlp_sigma: float = 1.0
    mlp_width: int | None = None
    bias_sigma: float = 0.0
    mlp_bias: float = 0.0
    token_noise: float = 0.0
    _M: np.ndarray | None = field(init=False, repr=False)
    _noise_law: NoiseLaw = field(init=False, repr=False)
    _attention_kind: AttentionKind = field(init=False, repr=False)
    _qk_law: QKLaw = field(init=False, repr=False)
    _mlp_block: Activation = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "n", _check_int("n", self.n, 1, _MAX_SIZE))
        set_(self, "d", _check_int("d", self.d, 2, _MAX_SIZE))
        set_(self, "beta", _check_real("beta", self.beta, 0.0))
        kind = ATTENTION_KINDS.get(self.attention)
        set_(self, "attention", kind.name)
        _require(isinstance(self.causal, bool | np.bool_), "causal", "True or False", self.causal)
        set_(self, "causal", bool(self.causal))
        law = NOISE_LAWS.get(self.noise)(self.d, self.law, self.sigma, self.eps)
        set_(self, "noise", law.name)
        set_(self, "law", law.law)
        set_(self, "sigma", law.sigma)
        set_(self, "eps", law.eps)
        set_(self, "_noise_law", law)
        set_(self, "_attention_kind", kind(self.beta))
        set_(self, "heads", _check_int("heads", self.heads, 1, _MAX_SIZE))
        set_(self, "Q", _matrix("Q", self.Q, self.d, self.heads))
        set_(self, "K", _matrix("K", self.K, self.d, self.heads))
        qk = QK_LAWS.get(self.qk)(self.d, self.qk_scale, self.qk_redraw, self.qk_samples)
        _require(not (qk.random and (self.Q is not None or self.K is not None)), "qk",
                 "'identity' when Q or K is given (a random qk law draws the query/key forms)",
                 qk.name)
        for name, value in (("qk", qk.name), ("qk_scale", qk.scale), ("qk_redraw", qk.redraw),
                            ("qk_samples", qk.samples), ("_qk_law", qk)):
            set_(self, name, value)
        set_(self, "norm", _check_choice("norm", self.norm, NORMS))
        set_(self, "_M", self._mean_matrix())
        set_(self, "token_noise", _check_real("token_noise", self.token_noise, 0.0))
        self._check_mlp()
        _require(self.norm != "peri" or self.has_mean or law.scale > 0, "norm",
                 "'post' or 'pre' when the branch output is zero (sigma = 0 and mean='none': "
                 "peri-norm cannot normalise it)", self.norm)

    def _check_mlp(self) -> None:
        block = MLPS.get(self.mlp)()
        object.__setattr__(self, "_mlp_block", block)
        sigma = _check_real("mlp_sigma", self.mlp_sigma, 0.0)
        width = None if self.mlp_width is None else _check_int("mlp_width", self.mlp_width, 1)
        object.__setattr__(self, "mlp_sigma", sigma)
        object.__setattr__(self, "mlp_width", width)
        if width is not None:
            block.check_width(width)
        _require(not (block.active and self.norm == "peri" and sigma == 0), "mlp_sigma",
                 "> 0 with norm='peri' (peri-norm normalises the block output)", sigma)
        object.__setattr__(self, "bias_sigma", _check_real("bias_sigma", self.bias_sigma, 0.0))
        hidden = _check_real("mlp_bias", self.mlp_bias, 0.0)
        object.__setattr__(self, "mlp_bias", hidden)
        _require(block.active or hidden == 0.0, "mlp_bias", "0 with mlp='none' (the hidden bias "
                 "of the MLP block needs a block)", hidden)
        if not block.active:
            given = [(k, v) for k, v, default in (("mlp_sigma", sigma, 1.0),
                                                  ("mlp_width", width, None)) if v != default]
            if given:
                active = ", ".join(n for n in MLPS.names() if n != "none")
                raise ParameterError(f"{given[0][0]} is used only with an MLP block (mlp = "
                                     f"{active}); got {given[0][0]}={given[0][1]!r} with "
                                     "mlp='none'")

    def _mean_matrix(self) -> np.ndarray | None:
        """The d x d array of `mean` when one is given; None for 'none' and 'identity' (the
        identity is never built: `M` makes it on demand, and d may be 10^6)."""
        if isinstance(self.mean, str):
            _check_choice("mean", self.mean, ("none", "identity"))
            return None
        return _matrix("mean", self.mean, self.d)

    @property
    def has_mean(self) -> bool:
        """True when the deterministic value part `M` is not zero (mean != 'none')."""
        return not (isinstance(self.mean, str) and self.mean == "none")

    @property
    def M(self) -> np.ndarray | None:
        """The mean part as a d x d array (None for 'none'; the identity is built on each call,
        so code on the hot path branches on `mean_kind` instead)."""
        if self.mean_kind == "identity":
            return np.eye(self.d)
        return self._M

    @property
    def mean_trace(self) -> float:
        """`tr(M) / d`: the `a` of `M = a I` for rotation-invariant parameters (0 for 'none')."""
        if self._M is None:
            return 1.0 if self.has_mean else 0.0
        return float(np.trace(self._M)) / self.d

    @property
    def noise_law(self) -> NoiseLaw:
        """The law of the value noise (`tokensde.model.noise`), bound to d, law, sigma and eps."""
        return self._noise_law

    @property
    def attention_kind(self) -> AttentionKind:
        """The attention kind (`tokensde.model.attention`), bound to beta."""
        return self._attention_kind

    @property
    def qk_law(self) -> QKLaw:
        """The law of the query/key forms (`tokensde.model.qk`), bound to d, qk_scale, qk_redraw and
        qk_samples; `qk_law.random` is False for 'identity'."""
        return self._qk_law

    @property
    def mlp_block(self) -> Activation:
        """The activation of the MLP block (`tokensde.model.mlp`); `mlp_block.active` is False for
        'none'."""
        return self._mlp_block

    @property
    def mlp_hidden(self) -> int:
        """Hidden width `m` of the MLP block: `mlp_width`, or `4 d` when not given."""
        return _MLP_WIDTH_FACTOR * self.d if self.mlp_width is None else self.mlp_width

    @property
    def has_bias(self) -> bool:
        """True when the layer has a random bias (`bias_sigma` or `mlp_bias` > 0)."""
        return self.bias_sigma > 0.0 or self.mlp_bias > 0.0

    @property
    def noise_scale(self) -> float:
        """Standard deviation scale of the layer noise: `eps` for scalar noise, else `sigma`."""
        return self._noise_law.scale

    @property
    def mean_kind(self) -> str:
        """'none', 'identity' or 'array'."""
        return self.mean if isinstance(self.mean, str) else "array"

    @property
    def rotation_invariant(self) -> bool:
        """True when every piece of a layer is rotation invariant, so that the Gram matrix is
        Markov and the Gram sampler applies (docs/gram.md, docs/variants.md): `M = a I`, the noise
        law and attention kind allowing it (Gaussian matrix noise), and query/key forms that are
        either one `Q^T K = c I` shared by every head or drawn afresh every layer from a
        rotation-invariant law (qk_redraw='layer'); any norm placement (pre/peri: the Gram matrix
        of the residual stream, radii included) and any MLP block; and no biases (`has_bias`:
        their law is rotation invariant too, but the Gram sampler does not carry them), nor independent
        token noise (`token_noise`: the same)."""
        if self.has_bias or self.token_noise > 0:
            return False
        law = self._qk_law
        if law.random:
            iso_qk = law.rotation_invariant and law.redraw == "layer"
        else:
            qk = self.qk_matrix()
            iso_qk = qk is None or (qk.ndim == 2 and _is_scaled_identity(qk))
        iso_m = self._M is None or _is_scaled_identity(self._M)
        gram = "gram" in self._noise_law.samplers and "gram" in self._attention_kind.samplers
        return iso_qk and iso_m and gram

    def qk_matrix(self) -> np.ndarray | None:
        """The bilinear form `Q^T K` of the logits (`(heads, d, d)` when Q or K is given per
        head), or None for the identity; computed once (the layer loop asks every layer)."""
        if self.Q is None and self.K is None:
            return None
        cached = self.__dict__.get("_qk_form")
        if cached is None:
            q = np.eye(self.d) if self.Q is None else self.Q
            k = np.eye(self.d) if self.K is None else self.K
            cached = q.swapaxes(-1, -2) @ k
            cached.setflags(write=False)
            object.__setattr__(self, "_qk_form", cached)
        return cached

    @classmethod
    def from_preset(cls, value_init: str, d: int = 3, **kw: Any) -> ModelParams:
        """Matrix noise with the law and `sigma` of the value-init preset `value_init` at `d`
        (`VALUE_INIT_PRESETS`); law, sigma and eps may not be given as well (None is allowed)."""
        preset = value_init_preset(value_init)
        clash = [k for k in ("law", "sigma", "eps") if kw.get(k) is not None]
        _require(not clash, "value_init", "given without " + "/".join(clash) + " (the preset "
                 "sets them)", value_init)
        noise = kw.get("noise", "matrix")
        _require(noise == "matrix", "value_init", "used with noise='matrix' (the presets are "
                 "entry laws of a value matrix)", f"{value_init} with noise={noise!r}")
        kw.pop("eps", None)
        return cls(d=d, law=preset.law, sigma=preset.sigma(d), **kw)

    def _key(self) -> tuple[Any, ...]:
        """The field values, arrays as (shape, bytes) with -0.0 folded into 0.0: what equality
        and the hash compare."""
        return tuple((v.shape, (v + 0.0).tobytes()) if isinstance(v, np.ndarray) else v
                     for v in (getattr(self, f.name) for f in fields(self) if f.init))

    def __eq__(self, other: object) -> bool:
        """Field by field; arrays elementwise (`p == p.with_()` is True)."""
        if not isinstance(other, ModelParams):
            return NotImplemented
        return self is other or self._key() == other._key()

    def __hash__(self) -> int:
        """Hash of the field values (equal parameters hash equal)."""
        return hash(self._key())

    def with_(self, **changes: Any) -> ModelParams:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (arrays as nested lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if not f.init or (f.name in _VARIANTS and getattr(self, f.name) == f.default):
                continue  # variants at their defaults: fingerprints stay as before
            v = getattr(self, f.name)
            out[f.name] = v.tolist() if isinstance(v, np.ndarray) else v
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelParams:
        """Inverse of `to_dict`; unknown keys are an error."""
        names = {f.name for f in fields(cls) if f.init}
        extra = set(data) - names
        _require(not extra, "model parameters", "known fields " + ", ".join(sorted(names)),
                 sorted(extra))
        return cls(**data)


_VARIANTS = ("heads", "qk", "qk_scale", "qk_redraw", "qk_samples", "norm", "mlp", "mlp_sigma",
             "mlp_width", "bias_sigma", "mlp_bias", "token_noise")  # in to_dict when not default


def _is_scaled_identity(a: np.ndarray, tol: float = 1e-12) -> bool:
    c = float(np.trace(a)) / a.shape[0]
    return bool(np.max(np.abs(a - c * np.eye(a.shape[0]))) <= tol * max(1.0, abs(c)))


_MAX_SIZE = 2**31 - 1  # the most tokens, dimensions or heads: torch indexes within int32 there
_MAX_LAYERS = 2**53  # the most layers a grid holds: beyond, T = steps * dt loses whole layers


@dataclass(frozen=True)
class TimeGrid:
    """Depth time: `steps` layers of step `dt = alpha^2`, spanning `T = steps * dt`."""

    steps: int
    dt: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", _check_int("steps", self.steps, 1, _MAX_LAYERS))
        object.__setattr__(self, "dt", _check_real("dt", self.dt, 0.0, True))

    @property
    def alpha(self) -> float:
        """Residual scale `alpha = sqrt(dt)`."""
        return math.sqrt(self.dt)

    @property
    def T(self) -> float:
        """Final depth time."""
        return self.steps * self.dt

    @classmethod
    def make(
        cls,
        layers: int | None = None,
        alpha: float | None = None,
        T: float | None = None,
        dt: float | None = None,
        exact: bool = True,
    ) -> TimeGrid:
        """Build from `(layers, alpha)` (alpha defaults to 1/sqrt(layers)) or from `(T, dt)`.

        With `(T, dt)`, T must be a whole number of steps dt (up to rounding; the error proposes
        the nearest dt); with `exact=False` the number of layers is `ceil(T/dt)` instead, so
        the horizon reached is at least T.
        """
        _require(isinstance(exact, bool | np.bool_), "exact", "True or False", exact)
        if layers is not None:
            _require(T is None and dt is None, "time", "given as (layers, alpha) or (T, dt), not both",
                     {"layers": layers, "T": T, "dt": dt})
            L = _check_int("layers", layers, 1, _MAX_LAYERS)
            a = 1.0 / math.sqrt(L) if alpha is None else _check_real("alpha", alpha, 0.0, True)
            return cls(L, a * a)
        _require(alpha is None, "alpha", "given together with layers", alpha)
        given = {k: v for k, v in (("T", T), ("dt", dt)) if v is not None}
        _require(T is not None and dt is not None, "time", "given as (layers, alpha) or (T, dt)",
                 given or "neither")
        t = _check_real("T", T, 0.0, True)
        h = _check_real("dt", dt, 0.0, True)
        _require(h <= t, "dt", f"<= T = {t:g}", h)
        r = t / h
        _require(r <= _MAX_LAYERS, "T", f"at most {_MAX_LAYERS} layer steps dt = {h:g} "
                 f"(T <= {_MAX_LAYERS * h:g})", t)
        if exact and abs(r - round(r)) > 1e-9:
            k = max(1, math.floor(r))
            raise ParameterError(f"T must be a whole number of layer steps dt; got T = {t:g}, "
                                 f"dt = {h:g} (T/dt = {r:.6g}, which would run to T = "
                                 f"{math.ceil(r) * h:g}): choose dt = T/k, e.g. "
                                 f"{t / k:.6g} ({k} layers) or {t / (k + 1):.6g} ({k + 1} layers)")
        steps = max(1, math.ceil(r - 1e-9))
        return cls(steps, h)
