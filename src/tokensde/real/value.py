"""The value path of a real attention head at init, `P = W_O W_V`, against the Gaussian matrix of the
same entry variance that the mapping gives tokensde (matrix noise, law 'gaussian').

`W_O` (`d x k`) and `W_V` (`k x d`) have independent entries N(0, var_O), N(0, var_V); `k` is the
inner dimension (`d_head` for one head, `d` for all heads together); `s^2 = var_O var_V`:

- an entry `P_ij = sum_l O_il V_lj`: `E P^2 = k s^2`, `E P^4 = 3 k (k + 2) s^4`, kurtosis
  `3 + 6 / k` (the Gaussian's: 3);
- for a unit `x`, `|P x|^2 = s^2 chi2_k chi2_d` (`V x ~ N(0, var_V I_k)`, then
  `O v ~ N(0, var_O |v|^2 I_d)`): mean `k d s^2`, relative variance `2/k + 2/d + 4/(k d)`
  (the Gaussian's, `k s^2 chi2_d`: `2/d`);
- given tokens `x, y`: `E[P x (P y)^T] = k s^2 <x, y> I_d`, as for the Gaussian. The per-layer
  covariance, hence the diffusion and the depth limit, is the same; the laws differ in fourth
  moments, which move the discrete network at O(1/L) only.
"""

from __future__ import annotations

import math

import torch

from ..model.checks import _check_choice, _check_int, _check_real

_LAWS: tuple[str, ...] = ("product", "gaussian")


def value_moments(k: int, d: int, var_o: float, var_v: float, law: str = "product"
                  ) -> dict[str, float]:
    """Closed-form moments of the value path of inner dimension `k` and width `d` (module docstring).

    Args:
        k: inner dimension of the product.
        d: width.
        var_o: entry variance of `W_O`.
        var_v: entry variance of `W_V`.
        law: 'product' (`W_O W_V`) or 'gaussian' (a Gaussian matrix of the same entry variance).

    Returns:
        Entry variance, entry fourth moment, entry kurtosis, and the mean and relative variance of
        `|P x|^2` for a unit `x`.
    """
    k, d = _check_int("k", k, 1), _check_int("d", d, 1)
    s2 = _check_real("var_o", var_o, 0.0, strict=True) * _check_real("var_v", var_v, 0.0,
                                                                    strict=True)
    product = _check_choice("law", law, _LAWS) == "product"
    var = k * s2
    m4 = 3.0 * k * (k + 2) * s2 * s2 if product else 3.0 * var * var
    return {"entry_var": var, "entry_m4": m4, "entry_kurtosis": m4 / var ** 2,
            "quad_mean": k * d * s2,
            "quad_relvar": 2.0 / k + 2.0 / d + 4.0 / (k * d) if product else 2.0 / d}


def draw_value_paths(k: int, d: int, var_o: float, var_v: float, draws: int,
                     gen: torch.Generator, law: str = "product",
                     dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Independent value paths `W_O W_V`, or Gaussian matrices of entry variance `k var_O var_V`.

    Args:
        k: inner dimension of the product (the head size).
        d: width.
        var_o: entry variance of `W_O`.
        var_v: entry variance of `W_V`.
        draws: number of paths.
        gen: the torch generator.
        law: 'product' or 'gaussian'.
        dtype: torch dtype.

    Returns:
        `(draws, d, d)`.
    """
    k, d, draws = _check_int("k", k, 1), _check_int("d", d, 1), _check_int("draws", draws, 1)
    _check_choice("law", law, _LAWS)
    if law == "gaussian":
        sd = math.sqrt(k * var_o * var_v)
        return sd * torch.randn(draws, d, d, generator=gen, dtype=dtype)
    o = math.sqrt(var_o) * torch.randn(draws, d, k, generator=gen, dtype=dtype)
    v = math.sqrt(var_v) * torch.randn(draws, k, d, generator=gen, dtype=dtype)
    return o @ v
