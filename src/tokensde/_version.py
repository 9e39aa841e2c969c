"""The installed package version (`0.0.0+unknown` in a source tree that was never installed).

Its own module, below everything else, so that any module can stamp results with the version
without importing the package root (which re-exports the simulator).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tokensde")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
