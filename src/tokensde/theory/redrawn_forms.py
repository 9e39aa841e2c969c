"""Two tokens with GOE query/key forms redrawn every layer (docs/variants.md §3): exact theory.

With forms `A = I + s R` drawn afresh every layer from the GOE, the depth limit averages the
attention over the law (docs/variants.md §3), and since the GOE is rotation invariant the averaged
coefficients depend on the pair only through `rho = <x_1, x_2>`: `rho` is an autonomous diffusion
again. Token 1 puts the weight `p = logistic(D_1)` on itself and token 2 `p' = logistic(D_2)`, with
`D_i = beta (<x_i, A x_i> - <x_1, A x_2>)`. For the GOE (`Cov(<a,Rb>, <c,Re>) = <a,c><b,e> +
<a,e><b,c>`) these are jointly Gaussian, and with `w = 1 - rho`, `v = 1 + rho`, `U, E` independent
standard normals,

    D_1, D_2 = m +- delta,   m = beta w (1 + s sqrt(2) U),   delta = beta s sqrt(w v) E.

In `z = artanh rho`, with `P = E[p p' + q q']`, `pq = E[p q]` (`q = 1 - p`) and
`V = E[(p - p')^2] / v = (beta s)^2 w E[E^2 (sinh(delta)/delta)^2 / (cosh m + cosh delta)^2]`,

    dz = sigma^2 [(d - 3)(V + 2 pq) + 1 - w P] dt + sigma sqrt(2 (P + V)) dB.

(`c_11 = sigma^2 (1 - 2 w pq)` and `c_12 = sigma^2 (1 - w P)` are the averaged `|y_1|^2` and
`<y_1, y_2>`; `E[(p - q)(p - p')] = E[(p - p')^2]` by the symmetry `E -> -E`, which removes the
cancellations at both ends.) At `s = 0` this is the spec model's `dz = sigma^2 ((d - 2) m +
s rho) dt + sigma sqrt(2 s) dB` (tested). Expectations by a trapezoid rule in `U` (fine
enough for the logistic's step) and Gauss-Hermite in `E`, on a coarse grid in `z`, interpolated
(the coefficient object `coefficients.RedrawnForms`); hitting probabilities by the first-passage
engine (`tokensde.theory.first_passage`). numpy and scipy only.
"""

from __future__ import annotations

from ..model.checks import _check_real
from . import first_passage as fp
from .coefficients import RedrawnForms, forms_z_coefficients
from .decision_time import _check_first_passage

__all__ = ["RedrawnForms", "forms_z_coefficients", "p_first_forms"]


def p_first_forms(beta: float, d: float, rho0: float | str, tol: float, scale: float,
                  sigma: float = 1.0) -> float:
    """`P(rho reaches -1 + tol before 1 - tol)` for GOE forms of scale `scale` redrawn every
    layer, from `rho0` or a uniform pair (`first_passage.hitting_probability`)."""
    b, dd, t, sg = _check_first_passage(beta, d, tol, sigma)
    s = _check_real("qk_scale", scale, 0.0)
    return fp.hitting_probability(RedrawnForms(b, dd, s, sg), rho0, t)
