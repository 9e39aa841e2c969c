"""tokensde: token dynamics of deep Transformers at random initialisation.

Simulate the deep random-attention network and its SDE limit, measure clustering, and show it.
"""

from ._version import __version__
from .model import SimResult, simulate
from .params import ModelParams, ParameterError, TimeGrid

__all__ = ["ModelParams", "ParameterError", "SimResult", "TimeGrid", "__version__", "simulate"]
