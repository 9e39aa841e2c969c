"""Measurements of simulated runs: clusters, statistics, Monte Carlo against theory, convergence.

Loaded on first use (`tokensde.analysis.stats` stays torch-free). Names not in `__all__` are
internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ..sim.coupled import coupled_states
    from .clusters import (
        OUTCOME_NAMES,
        ClusterReport,
        Outcome,
        analyze,
        antipodal_fraction,
        classify_clusters,
        effective_rank,
        inner_product_histogram,
        is_antipodal,
        is_merged,
        minority_law,
        pair_fractions,
        tolerance_report,
        upper_pairs,
    )
    from .convergence import (
        RESOLVE_Z,
        fit_order,
        poisson_weights,
        run_convergence,
        summarise,
        weak_levels_used,
        weighted_means,
    )
    from .level_samples import Problem, coupled_samples
    from .pair_monte_carlo import PairOutcome, hybrid_monte_carlo, monte_carlo
    from .stats import t_interval, wilson
    from .step_coupled import measure_step_error, simulate_with_step_error
    from .step_error import mc_error

__all__ = [
    "OUTCOME_NAMES",
    "RESOLVE_Z",
    "ClusterReport",
    "Outcome",
    "PairOutcome",
    "Problem",
    "analyze",
    "antipodal_fraction",
    "classify_clusters",
    "coupled_samples",
    "coupled_states",
    "effective_rank",
    "fit_order",
    "hybrid_monte_carlo",
    "inner_product_histogram",
    "is_antipodal",
    "is_merged",
    "mc_error",
    "measure_step_error",
    "minority_law",
    "monte_carlo",
    "pair_fractions",
    "poisson_weights",
    "run_convergence",
    "simulate_with_step_error",
    "summarise",
    "t_interval",
    "tolerance_report",
    "upper_pairs",
    "weak_levels_used",
    "weighted_means",
    "wilson",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
