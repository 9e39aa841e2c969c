"""tokensde: token dynamics of deep Transformers at random initialisation.

Simulate the deep random-attention network and its SDE limit, measure clustering, and show it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tokensde")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

from .model import SimResult, simulate
from .params import ModelParams, ParameterError, TimeGrid

__all__ = ["ModelParams", "ParameterError", "SimResult", "TimeGrid", "__version__", "simulate"]
