"""tokensde: token dynamics of deep Transformers at random initialisation.

Simulate the deep random-attention network and its SDE limit, measure clustering, run sweeps
and reproduce the study. The names below are the public API; `tokensde.theory` holds the exact
two-token results. Each layer folder (`tokensde.model`, `tokensde.sim`, ...) lists what it
offers in its own `__all__`; a name listed nowhere is internal and may change without notice.

Every name loads on first use (PEP 562): `import tokensde` imports neither numpy nor torch, so
the command line starts at once, and `tokensde.theory` never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from ._version import __version__

if TYPE_CHECKING:
    from . import theory
    from .analysis.clusters import analyze, pair_fractions
    from .io.store import load_result, save_result
    from .model.params import VALUE_INIT_PRESETS, ModelParams, ParameterError, TimeGrid
    from .sim.observe import Observer
    from .sim.options import Execution, InitialState, Recording, StepControl, StoppingRule
    from .sim.result import SimResult
    from .sim.simulate import simulate
    from .study.reproduce import reproduce
    from .sweep.engine import run_sweep, sweep_status
    from .sweep.store import load_table

__all__ = [
    "VALUE_INIT_PRESETS",
    "Execution",
    "InitialState",
    "ModelParams",
    "Observer",
    "ParameterError",
    "Recording",
    "SimResult",
    "StepControl",
    "StoppingRule",
    "TimeGrid",
    "__version__",
    "analyze",
    "load_result",
    "load_table",
    "pair_fractions",
    "reproduce",
    "run_sweep",
    "save_result",
    "simulate",
    "sweep_status",
    "theory",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
