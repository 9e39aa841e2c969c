"""The figures of the study as data (`FIGURES`: name -> `FigureSpec` with title, claim, how the
result is computed or read back and how it is drawn into a report section); `build_section`
turns a failure into a 'failed' section."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from ..io.report import Section
from . import animation, convergence, meanfield, mlp, multi, phase, real, trajectories, variants, vit
from . import token_noise_section as token_noise
from .context import Context, FigureSpec


def _figure(name: str, title: str, data: Callable[[Context], tuple[Any, bool]],
            draw: Callable[[Context, FigureSpec, Any, bool], Section], claim: str) -> FigureSpec:
    """A `FigureSpec` whose claim is written as a paragraph: its line breaks and indentation
    become single spaces."""
    return FigureSpec(name, title, " ".join(claim.split()), data, draw)


FIGURES: dict[str, FigureSpec] = {s.name: s for s in (
    _figure(animation._NAME, "Tokens in motion",
            animation._motion_data, animation._draw_motion, """
        Across depth, tokens driven by one common noise path gather into clusters on the circle
        and on the sphere, and the clusters can settle as antipodal pairs: a bipolar formation
        (one run per dimension, drawn frame by frame)."""),
    _figure("phase-diagram", "Two tokens: phase diagram",
            phase._phase_data, phase._draw_phase, """
        Antipodal pairs persist with positive probability iff cosh(2 beta) > d - 2; the Monte Carlo
        probability over (beta, d) changes where beta_c(d) says."""),
    _figure("theory-vs-simulation", "Two tokens: exact theory vs simulation",
            phase._phase_data, phase._draw_theory, """
        The scale-function probability P_anti(beta, d) matches Monte Carlo of the full network
        within its intervals."""),
    _figure("phase-over-d", "Two tokens: the boundary over three decades of d",
            phase._phase_d_data, phase._draw_phase_d, """
        P_anti is positive exactly above beta_c(d) = arccosh(d - 2)/2 for every d, and the network
        matches the exact probability at d up to 4096 (Gram sampler)."""),
    _figure("decision-times", "How long runs stay undecided",
            phase._decision_data, phase._draw_decisions, """
        Each run is followed until it is absorbed. For two tokens the time to decision follows the
        exact survival law of the rho diffusion, whose tail slows down as beta approaches beta_c;
        many tokens can take far longer."""),
    _figure("trajectories", "Tokens on the circle and the sphere",
            trajectories._trajectories_data, trajectories._draw_trajectories, """
        Under the random network tokens cluster, and may split into antipodal groups; under the
        deterministic flow the same tokens merge into one cluster."""),
    _figure("histograms", "Inner products across depth",
            trajectories._histograms_data, trajectories._draw_histograms, """
        The law of pairwise inner products moves to +1 (merging) below beta_c and to both +1 and -1
        (antipodal pairs) above it."""),
    _figure("multi-token", "Many tokens: outcome probabilities",
            multi._multi_data, multi._draw_multi, """
        For n tokens the end states are one cluster or bipolar configurations, with probabilities
        that depend on beta, d and n."""),
    _figure("variants", "Two tokens under heads, random query/key forms and norm placement",
            variants._variants_data, variants._draw_variants, """
        The antipodal phase of two tokens survives several heads and random query/key forms, with a
        probability that the variant changes; pre- and peri-norm slow the approach to the antipode
        (docs/variants.md)."""),
    _figure("mlp", "Two tokens with a random MLP block: the antipodal state is lost",
            mlp._mlp_data, mlp._draw_mlp, """
        A random MLP block gives antipodal tokens noise that is not opposite, so for d >= 3 the
        antipode is never reached: the chance of coming within tol of it first falls like
        tol^((d-3)/2), as the exact first-passage law of the rho diffusion says
        (docs/variants.md §5)."""),
    _figure("meanfield", "Many tokens: particles against the limit measure",
            meanfield._meanfield_data, meanfield._draw_meanfield, """
        With common noise the many-token limit is the initial measure carried by one random flow.
        From the uniform start it ends as two antipodal atoms of mass 1/2 on every path (a
        symmetry); n i.i.d. particles fall short of 1/2 by their initial asymmetry, which the
        flow amplifies, so the particle law approaches the limit's only slowly in n
        (docs/meanfield.md)."""),
    _figure("token-noise", "Independent token noise: the order parameter across tau_c",
            token_noise._token_noise_data, token_noise._draw_token_noise, """
        With its own Brownian noise on every token (no common noise, M = I) the uniform state of
        many tokens loses stability below the theory's critical token noise tau_c: the measured
        order parameter is that of the many-token limit well below tau_c and at the level of
        i.i.d. uniform tokens well above it (docs/token-noise.md)."""),
    _figure("convergence", "Depth limit: the network converges to the SDE",
            convergence.convergence_data, convergence._draw_convergence, """
        The L-layer network is a consistent scheme for the SDE: weak error O(1/L) (expected order
        1), strong error on a shared Brownian path O(L^-1/2)."""),
    _figure("vit", "ViT: value initialisation and accuracy",
            vit._vit_data, vit._draw_vit, """
        How the value-matrix initialisation (the noise law of the theory) affects a trained ViT's
        accuracy."""),
    _figure("vit-depth", "ViT: value noise against depth, in the network of the theory",
            vit._vit_depth_data, vit._draw_vit_depth, """
        Suppressing the value-matrix noise at initialisation costs accuracy in the attention-only
        network of spec §2 (1/sqrt(L) residual scale, RMS re-normalisation), and the cost depends on
        depth; the standard pre-norm block is the contrast."""),
    _figure("real", "A real GPT-2 at init against tokensde",
            real._real_data, real._draw_real, """
        A GPT-2 built from its configuration, at random init, has at every layer the mean token
        cosine of tokensde's discrete network mapped from the same configuration (value path,
        query/key forms redrawn per layer, GELU at its pre-activation variance, pre-norm, causal
        mask), within the Monte Carlo error over independent inits (docs/real.md)."""),
)}


def _remedy(name: str, ctx: Context) -> str:
    """What to do about a failed section: the file to delete is named in the error when a saved
    result is damaged; otherwise re-run, or leave the figure out."""
    return (f"Fix what the error names (a damaged file under {ctx.out}: delete it to recompute "
            f"that result) and run the same command again, or leave this figure out with "
            f"--skip {name}.")


def build_section(name: str, ctx: Context) -> Section:
    """Build one figure's section; an error becomes a 'failed' section that says what failed.

    Args:
        name: A figure name of `FIGURES`.
        ctx: Output directory, size, seed and workers.

    Returns:
        The report `Section` (status 'failed' with the error and its remedy when it failed).
    """
    spec = FIGURES[name]
    t0 = time.perf_counter()
    try:
        sec = spec.build(ctx)
    except Exception as err:  # report the failure, keep the rest of the report
        tb = traceback.format_exception_only(type(err), err)[-1].strip()
        sec = Section(name, spec.title, spec.claim, status="failed",
                      note=f"Building this section failed: {tb}. {_remedy(name, ctx)}")
    sec.provenance.setdefault("wall_s", round(time.perf_counter() - t0, 2))
    return sec
