"""The time model of this machine: a few tiny timed runs, fitted once and cached on disk.

`time_model()` returns the `sim.budget.TimeModel` (`seconds = c0 x steps + c1 x work`) of this
machine: read from the cache file `estimate.json` in `cache_dir()` (`TOKENSDE_CACHE_DIR`, else
`$XDG_CACHE_HOME/tokensde`, else `~/.cache/tokensde`), where it is keyed by the package version,
the torch version, the work units and the number of torch threads; else fitted (`budget.fit_time_model`) to
`calibration_samples()`, under a second of tiny `simulate` runs, and written there. A cache
file that cannot be read is replaced; where calibration fails the committed defaults
(`budget.DEFAULT_TIME_MODEL`) are used and the model's `source` says so. With
`TOKENSDE_CALIBRATE=0` nothing is timed or written and the defaults are used.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .._version import __version__
from ..sim.budget import (
    CUDA_TIME_MODEL,
    DEFAULT_TIME_MODEL,
    RUN_UNITS,
    SAMPLER_STEPS,
    SCORE_UNITS,
    TimeModel,
    fit_time_model,
)
from .store import write_json

__all__ = ["CACHE_ENV", "CACHE_FILE", "CALIBRATE_ENV", "cache_dir", "cache_key",
           "calibration_samples", "time_model"]

CACHE_ENV = "TOKENSDE_CACHE_DIR"
CALIBRATE_ENV = "TOKENSDE_CALIBRATE"
CACHE_FILE = "estimate.json"
# the timed runs: (n, d, layers, runs, sampler), from a fixed cost per layer (n = 2, one run) to
# mostly work (n = d = 32); each is timed at `layers` and 3 x `layers`, and the difference kept,
# so that the set-up of a call (milliseconds) is not taken for work: about 0.6 s in all
_CASES: tuple[tuple[int, int, int, int, str], ...] = (
    (2, 2, 200, 1, "full"),
    (2, 3, 50, 1, "gram"),
    (2, 3, 60, 512, "auto"),
    (8, 3, 100, 64, "auto"),
    (32, 32, 20, 16, "full"),
)


def cache_dir() -> Path:
    """The folder of the cache file: `TOKENSDE_CACHE_DIR`, else `$XDG_CACHE_HOME/tokensde`, else
    `~/.cache/tokensde`."""
    given = os.environ.get(CACHE_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tokensde"


def cache_key() -> str:
    """What a calibration holds for: the package version, the torch version, the work units
    (`budget.SCORE_UNITS`, RUN_UNITS, SAMPLER_STEPS) and the torch threads."""
    import torch

    units = f"units {SCORE_UNITS}/{RUN_UNITS}/" + "/".join(f"{v:g}" for v in SAMPLER_STEPS.values())
    return (f"tokensde {__version__}, torch {torch.__version__}, {units}, "
            f"{torch.get_num_threads()} threads")


def calibration_samples(repeats: int = 2) -> list[tuple[float, float, float]]:
    """`(steps, work, seconds)` of the tiny `simulate` runs of CASES, each the difference of a run
    of 3 x layers and one of layers (`sim.simulate.simulation_budget` gives steps and work), each
    run timed (CPU time of this process) the fastest of `repeats` after one warm-up run."""
    from ..model.params import ModelParams, TimeGrid
    from ..sim.options import Execution, Recording
    from ..sim.simulate import simulate, simulation_budget

    two = Recording(checkpoints=2)
    simulate(ModelParams(n=2, d=2), TimeGrid.make(layers=20), recording=two)  # warm-up
    out = []
    for n, d, layers, runs, sampler in _CASES:
        p, parts = ModelParams(n=n, d=d), []
        for grid in (TimeGrid.make(layers), TimeGrid.make(3 * layers)):
            execution = Execution(sampler=sampler)
            b = simulation_budget(p, grid, runs, recording=two, execution=execution)
            best = math.inf
            for _ in range(repeats):
                t0 = time.process_time()  # this process's CPU time: not another's load
                simulate(p, grid, runs=runs, recording=two, execution=execution)
                best = min(best, time.process_time() - t0)
            parts.append((b.steps, b.work, best))
        (s1, w1, t1), (s3, w3, t3) = parts
        out.append((s3 - s1, w3 - w1, max(t3 - t1, 1e-3 * t3)))
    return out


def _valid(entry: Any) -> TimeModel | None:
    try:
        c0, c1 = float(entry["c0"]), float(entry["c1"])
    except (TypeError, KeyError, ValueError):
        return None
    ok = math.isfinite(c0 + c1) and c0 >= 0 and c1 >= 0 and c0 + c1 > 0
    return TimeModel(c0, c1, "calibrated on this machine") if ok else None


def _read(path: Path) -> tuple[dict[str, Any], bool]:
    """The cache document and whether it was readable (a missing file is readable and empty)."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, True
    except (OSError, ValueError, UnicodeDecodeError):
        return {}, False
    return (doc, True) if isinstance(doc, dict) else ({}, False)


def time_model(device: str = "cpu",
               calibrate: Callable[[], Sequence[tuple[float, float, float]]] | None = None
               ) -> TimeModel:
    """The time model of `device` on this machine: CUDA devices get `budget.CUDA_TIME_MODEL`;
    the CPU the cached calibration of `cache_key()`, else a new one (`calibrate`, default
    `calibration_samples`) written to the cache, else DEFAULT_TIME_MODEL.

    Args:
        device: 'cpu', 'cuda' or 'cuda:N'.
        calibrate: Returns the timed `(steps, work, seconds)` samples to fit, or None for
            `calibration_samples`.

    Returns:
        The model; its `source` says whether it was calibrated here or why the defaults are used.
    """
    if str(device).startswith("cuda"):
        return CUDA_TIME_MODEL
    if os.environ.get(CALIBRATE_ENV, "").strip() == "0":
        return replace(DEFAULT_TIME_MODEL, source=f"default coefficients ({CALIBRATE_ENV}=0)")
    try:
        path: Path | None = cache_dir() / CACHE_FILE
    except (RuntimeError, KeyError, OSError):  # no home folder to find: calibrated, not cached
        path = None
    key = cache_key()
    doc, readable = _read(path) if path is not None else ({}, True)
    cached = _valid(doc.get(key))
    if cached is not None:
        return cached
    try:
        samples = [tuple(float(v) for v in s) for s in (calibrate or calibration_samples)()]
        model = fit_time_model(samples)  # type: ignore[arg-type]
        if _valid({"c0": model.c0, "c1": model.c1}) is None:
            raise ValueError(f"fitted c0 = {model.c0:.3g} s, c1 = {model.c1:.3g} s")
    except Exception as err:  # any failure: the defaults
        return replace(DEFAULT_TIME_MODEL, source=f"default coefficients; calibration failed: "
                       f"{type(err).__name__}: {err}")
    # entries of other package or torch versions are dropped: they will not be read again
    same = key.rsplit(",", 1)[0] + ","
    keep = {k: v for k, v in doc.items() if isinstance(k, str) and k.startswith(same)}
    keep[key] = {"c0": model.c0, "c1": model.c1, "samples": samples,
                 "when": datetime.now(UTC).isoformat(timespec="seconds")}
    if path is not None:
        with suppress(OSError, ValueError):  # a cache that cannot be written: calibrated again
            write_json(path, keep)
            if not readable:
                model = replace(model, source=model.source + f"; the unreadable {path} was "
                                "replaced")
    return model
