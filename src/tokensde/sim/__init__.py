"""How it is simulated: the driver, the layers, the SDE schemes, the exact samplers.

`simulate` runs many independent networks (or their SDE limit) and returns a `SimResult` of numpy
arrays; `InitialState`, `StoppingRule`, `Recording` and `Execution` are its options, and an
`Observer` is a statistic it keeps at checkpoints (`Recording(observe=...)`; its own, if it names
them), reading the layer, the time and the state. `coupled_states` and `coupled_paths` run
networks of several depths and their SDE on one Brownian path; `coupled_states` hands its
`CoupledState` to a recorder (`OnLayers(layers, fn)`) at the fine steps it names. Names not in
`__all__` (the layers, samplers, the Gram-space sampler, the loop) are internal. The names load
on first use (PEP 562): `tokensde.sim.budget` and `tokensde.sim.result` import no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .coupled import CoupledState, coupled_paths, coupled_states
    from .loop import OnLayers
    from .observe import Observer
    from .options import Execution, InitialState, Recording, StepControl, StoppingRule
    from .reduced import reduced_diffusion
    from .result import SimResult
    from .rng import RunStreams, derive_seed
    from .samplers import choose_sampler
    from .simulate import simulate

__all__ = [
    "CoupledState",
    "Execution",
    "InitialState",
    "Observer",
    "OnLayers",
    "Recording",
    "RunStreams",
    "SimResult",
    "StepControl",
    "StoppingRule",
    "choose_sampler",
    "coupled_paths",
    "coupled_states",
    "derive_seed",
    "reduced_diffusion",
    "simulate",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
