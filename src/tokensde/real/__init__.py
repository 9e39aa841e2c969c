"""Real Transformers at initialisation against tokensde (docs/real.md).

Built offline from configuration objects (the optional extra `[real]`, HuggingFace transformers,
for GPT-2, BERT, ViT and Llama; torch's own `nn.TransformerEncoderLayer` needs nothing more), measured at
every layer over independent inits, mapped onto a tokensde model and predicted by its discrete
network and its depth limit.
"""

from __future__ import annotations

from .experiment import RealRun, agreement, layer_threshold, predicted_run, run_real, save_run
from .introspect import IntrospectionError, NetworkRead, map_read, read_network, run_own
from .mapping import BlockLaw, Mapping, map_network, to_model
from .models import (
    ARCHS,
    INSTALL_HINT,
    MissingExtraError,
    RealSpec,
    build,
    has_transformers,
    hidden_states,
    make_inputs,
    require_transformers,
)
from .value import draw_value_paths, value_moments

__all__ = ["ARCHS", "INSTALL_HINT", "BlockLaw", "IntrospectionError", "Mapping",
           "MissingExtraError", "NetworkRead", "RealRun", "RealSpec", "agreement", "build",
           "draw_value_paths", "has_transformers", "hidden_states", "layer_threshold",
           "make_inputs", "map_network", "map_read", "predicted_run", "read_network", "require_transformers",
           "run_own", "run_real", "save_run", "to_model", "value_moments"]
