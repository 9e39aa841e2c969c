"""Fixtures shared by every test module."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The time model's cache (`tokensde.io.calibration`) lives in a temporary folder for the
    whole session, never in the user's home: calibrated at most once per session."""
    old = os.environ.get("TOKENSDE_CACHE_DIR")
    os.environ["TOKENSDE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("TOKENSDE_CACHE_DIR", None)
    else:
        os.environ["TOKENSDE_CACHE_DIR"] = old
