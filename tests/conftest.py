"""Fixtures shared by every test module."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Under pytest-xdist every worker is one process on one core: torch's (and OpenMP's) own threads
# would only compete with the other workers, and spin while they wait.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`-n auto --dist loadgroup`), the tests that start a Ray cluster run in
    one worker, one after another (two local clusters at once would compete for ports and
    cores), and so do the browser tests (they share one report, built once per worker)."""
    for item in items:
        for marker in ("ray", "browser"):
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.xdist_group(marker))


_CPU_LOG = os.environ.get("TOKENSDE_TEST_CPU_LOG")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With TOKENSDE_TEST_CPU_LOG=FILE, append each test's CPU seconds (setup, call and teardown,
    in this process and the subprocesses it waited for) to FILE as `nodeid<TAB>seconds`: what to
    mark slow when the quick set passes its CPU budget."""
    import resource
    import time

    def cpu() -> float:
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + kids.ru_utime + kids.ru_stime

    t0 = cpu()
    yield
    if _CPU_LOG:
        with open(_CPU_LOG, "a") as fh:
            fh.write(f"{item.nodeid}\t{cpu() - t0:.3f}\n")
