"""Validation helpers shared by every layer: each bad value raises `ParameterError` naming itself.

numpy only (no torch), at the bottom of the import graph, so that the strategy registries
(`tokensde.model.noise`, `tokensde.model.attention`) and `params` can all use them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class ParameterError(ValueError):
    """An invalid parameter: the message names it and the allowed range."""


def _require(ok: bool | np.bool_, name: str, allowed: str, value: Any) -> None:
    """Raise `ParameterError` "`name` must be `allowed`; got `value`" unless `ok`."""
    if not ok:
        raise ParameterError(f"{name} must be {allowed}; got {value!r}")


def _check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """Return `value` as an int in [minimum, maximum] (no upper end when None), or raise
    ParameterError naming `name`."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= minimum \
        and (maximum is None or value <= maximum)
    want = f"an integer >= {minimum}" if maximum is None else \
        f"an integer from {minimum} to {maximum}"
    _require(ok, name, want, value)
    return int(value)


def _check_real(name: str, value: Any, minimum: float = 0.0, strict: bool = False) -> float:
    """Return `value` as a finite float >= minimum (> if strict), or raise ParameterError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    ok = math.isfinite(v) and (v > minimum if strict else v >= minimum)
    rel = ">" if strict else ">="
    want = "a finite number" if minimum == -math.inf else f"a finite number {rel} {minimum:g}"
    _require(ok, name, want, value)
    return v


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return `value` if it is one of `choices`, else raise ParameterError."""
    _require(value in choices, name, "one of " + ", ".join(choices), value)
    return str(value)


def _real_array(name: str, value: Any) -> np.ndarray:
    """`value` as a float64 array; ParameterError naming `name` if it is ragged, complex or not
    numeric (numpy would raise a bare error, or drop the imaginary part)."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be an array of real numbers; got a ragged or "
                             "non-numeric value") from None
    if raw.dtype.kind not in "biuf":
        what = "complex entries" if raw.dtype.kind == "c" else f"entries of type {raw.dtype}"
        raise ParameterError(f"{name} must be an array of real numbers; got {what}")
    return np.array(raw, dtype=np.float64)


# Clustering tolerances (spec §7): float64 Gram entries resolve gaps down to TOL_MIN.
TOL_MIN = 1e-12
_TOL_MAX = 0.5
# The smallest tol in machine epsilons of the Gram dtype (float32: 1.2e-4; float64 uses TOL_MIN).
_TOL_EPS = 1000.0


_TOL_DTYPES: tuple[str, ...] = ("float64", "float32")  # the dtypes a simulation runs in


def check_tol(tol: float, name: str = "tol", dtype: str = "float64") -> float:
    """Validate a clustering tolerance in `[TOL_MIN, TOL_MAX]` for float64 Gram matrices.

    Args:
        tol: the tolerance (two tokens are merged when `<x_i, x_j> > 1 - tol`).
        name: the parameter's name in the error message.
        dtype: 'float64' or 'float32'; for float32 the floor is `_TOL_EPS` times its machine epsilon.

    Returns:
        `tol` as a float.

    Raises:
        ParameterError: `tol` is not a finite number in the range.
    """
    _check_choice("dtype", dtype, _TOL_DTYPES)
    t = _check_real(name, tol, 0.0, strict=True)
    eps = float(np.finfo(dtype).eps)
    low = max(TOL_MIN, _TOL_EPS * eps)
    if not low <= t <= _TOL_MAX:
        raise ParameterError(f"{name} must be a number in [{low:g}, {_TOL_MAX:g}] ({dtype} Gram "
                             f"entries resolve gaps only down to ~{eps:.0e}); got {tol!r}")
    return t
