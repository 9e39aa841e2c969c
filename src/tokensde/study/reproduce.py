"""Every figure of the study, then one self-contained HTML report (`tokensde reproduce`).

Each figure reuses its saved result under `DIR/data/` (and finished sweep cells under
`DIR/sweeps/`), so a second call only redraws, and an interrupted call resumes. A figure whose
build fails becomes a section that says so; the report is written either way.
`DIR/reproduce.json` records each section's status and wall time.

The sections run at once on a pool of `workers` processes (one torch thread each), the costliest
first (`SECTION_CPU_S`), and the report keeps its order; a section that shares its saved result
with another runs in the same process after it, and one that would take more than its share of
the pool runs first on its own, its sweep or training on all `workers`. Every section runs on one
torch thread whatever `workers` is, so the saved results do not depend on it. Before any work
the run prints its time estimate (`estimate`).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from .._version import __version__
from ..io.report import Section, _check_report_path, write_report
from ..io.store import check_output, header, write_json
from ..model.params import ParameterError
from ..sweep.backends import _one_torch_thread
from .context import Context, _one_thread
from .registry import FIGURES, _remedy, build_section

_KIND_RUN = "tokensde.reproduce"

# CPU seconds of each section built from nothing on one process (one torch thread) of the
# reference 2-core machine, the one of `budget.DEFAULT_TIME_MODEL` and docs/benchmarks.md. Quick:
# each section's CPU time in `tokensde reproduce --quick` there, beside one other CPU-bound job
# (an upper bound: CPU time grows when the other core is busy); full: twice the wall time of the
# sweep sections on 2 workers, the wall time of the others. They order the pool's work and make
# the estimate; a section not listed counts DEFAULT_CPU_S of its size.
_SECTION_CPU_S: dict[str, dict[str, float]] = {
    "tiny": {},
    "quick": {"tokens-in-motion": 8.3, "phase-diagram": 31.1, "theory-vs-simulation": 1.7,
              "phase-over-d": 41.5, "decision-times": 13.2, "trajectories": 17.8,
              "histograms": 2.2, "multi-token": 14.7, "variants": 28.8, "mlp": 34.2,
              "meanfield": 2.2, "token-noise": 16.0, "convergence": 49.7, "vit": 36.2,
              "vit-depth": 87.8, "real": 3.3},
    "full": {"tokens-in-motion": 20.0, "phase-diagram": 410.0, "theory-vs-simulation": 1.0,
             "phase-over-d": 3700.0, "decision-times": 95.0, "trajectories": 21.0,
             "histograms": 8.0, "multi-token": 1000.0, "variants": 195.0, "mlp": 345.0,
             "meanfield": 60.0, "token-noise": 120.0, "convergence": 300.0, "vit": 1800.0,
             "vit-depth": 7200.0, "real": 60.0},
}
_DEFAULT_CPU_S = {"tiny": 2.0, "quick": 10.0, "full": 60.0}
_REUSED_CPU_S = 1.5  # a section that only redraws its saved result
_START_S = 4.0  # starting the pool: each process imports torch (CPU seconds, in parallel)
# sections whose data step runs on `workers` processes itself (a sweep, a training, chunks)
_PARALLEL = frozenset({"phase-diagram", "phase-over-d", "multi-token", "variants", "mlp",
                      "token-noise", "convergence", "vit", "vit-depth"})


def reproduce(out: str | os.PathLike, size: str = "quick", seed: int = 0, workers: int = 2,
              only: Sequence[str] | None = None, log: Callable[[str], None] = lambda s: None,
              skip: Sequence[str] | None = None, force: bool = False, yes: bool = False
              ) -> tuple[Path, list[Section], dict[str, Any]]:
    """Build the sections `only` (default: all, in report order) less those in `skip`, and
    write `out/report.html`.

    Every output path is checked first: `out` a writable directory, and `out/report.html`
    absent or a report of ours (another file there is replaced only with `force`). Returns the
    report path, the sections and the run record written to `out/reproduce.json`; a failed
    section is recorded there (`record['failed']`, each with its remedy) and in the report.

    Args:
        out: The results directory.
        size: 'tiny', 'quick' or 'full' (`STUDY_SIZES`).
        seed: Root seed.
        workers: Processes for the heavy parts.
        only: Figure names to build (None: all).
        log: Called with a line of progress for each section.
        skip: Figure names to leave out.
        force: Replace an `out/report.html` that tokensde did not write, and saved results
            made with other settings (another seed).
        yes: Run the sweeps whose time estimate exceeds TOKENSDE_MAX_HOURS.

    Returns:
        `(report_path, sections, record)`.
    """
    for what, given in (("only", only), ("skip", skip)):
        bad = [n for n in given or () if n not in FIGURES]
        if bad:
            raise ParameterError(f"{what} must name figures among {', '.join(FIGURES)}; "
                                 f"got {bad}")
    if only is not None and not list(only):
        raise ParameterError("only must name at least one figure (leave it out to build all); "
                             "got an empty list")
    names = [n for n in (list(only) if only else list(FIGURES)) if n not in set(skip or ())]
    if not names:
        raise ParameterError("only and skip leave no figure to build")
    check_output(out, "out", directory=True)
    report = _check_report_path(Path(out) / "report.html", "out", force)
    check_output(Path(out) / "reproduce.json", "out", suffixes=(".json",))
    ctx = Context(Path(out), size, seed, workers, log=log, yes=yes, force=force)
    t0, c0 = time.perf_counter(), _cpu_s()
    seconds, speed = _estimate(names, ctx)
    log(f"estimate: about {_minutes(seconds)} for {len(names)} sections on {ctx.workers} "
        f"process{'es' * (ctx.workers > 1)} ({speed})")
    built = _build_sections(names, ctx)
    sections = [built[name] for name in names]
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    reused = sum(bool(s.provenance.get("reused")) for s in sections)
    record = {
        "size": size, "seed": seed, "workers": workers, "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1), "estimate_s": round(seconds, 1),
        "cpus": os.cpu_count(), "python": platform.python_version(), "version": __version__,
        "command": (f"tokensde reproduce --{size} --out {out}" if size != "tiny" else
                    f"tokensde reproduce --size tiny --out {out}")
        + (f" --only {','.join(only)}" if only else "")
        + (f" --skip {','.join(skip)}" if skip else ""),
        "reused_sections": reused,
        "sections": {s.key: {"status": s.status, "wall_s": s.provenance.get("wall_s"),
                             "cpu_s": s.provenance.get("cpu_s"),
                             "reused": s.provenance.get("reused"),
                             "note": s.note if s.status != "ok" else ""} for s in sections},
        "failed": {s.key: s.note for s in sections if s.status == "failed"},
    }
    write_json(ctx.out / "reproduce.json", header(_KIND_RUN, **record))
    meta = {"size": size, "seed": seed, "workers": workers,
            "wall time": f"{wall / 60:.1f} min",
            "saved results reused": f"{reused} of {len(sections)} sections",
            "command": record["command"]}
    path = write_report(sections, report, meta=meta, force=force,
                        title="tokensde: token dynamics of deep random Transformers")
    return path, sections, record


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _groups(names: Sequence[str]) -> list[list[str]]:
    """`names` in report order, grouped by their data step: sections that share a saved result
    (phase-diagram, theory-vs-simulation) are built one after the other in one process."""
    groups: dict[Any, list[str]] = {}
    for name in names:
        groups.setdefault(FIGURES[name].data, []).append(name)
    return list(groups.values())


def _reused(ctx: Context) -> set[str]:
    """The sections that an earlier run of this size and seed into `ctx.out` built 'ok' (their
    saved results will be reused)."""
    try:
        doc = json.loads((ctx.out / "reproduce.json").read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(doc, dict) or doc.get("size") != ctx.size or doc.get("seed") != ctx.seed:
        return set()
    sections = doc.get("sections")
    return {k for k, v in sections.items() if isinstance(v, dict) and v.get("status") == "ok"} \
        if isinstance(sections, dict) else set()


def _section_cpu(names: Sequence[str], ctx: Context) -> dict[str, float]:
    """CPU seconds each section of `names` takes on the reference machine (`SECTION_CPU_S`;
    REUSED_CPU_S for one an earlier run of this size and seed built)."""
    table, reused = _SECTION_CPU_S[ctx.size], _reused(ctx)
    return {n: _REUSED_CPU_S if n in reused else table.get(n, _DEFAULT_CPU_S[ctx.size]) for n in names}


def _plan(names: Sequence[str], ctx: Context, cost: dict[str, float]
          ) -> tuple[list[list[str]], list[list[str]], int]:
    """`(solo, pooled, processes)`: the groups run first one after the other in this process on
    all `ctx.workers` (a parallel section costing more than its share of the pool, or every group
    when the pool would hold one process), then the groups for a pool of `processes`, costliest
    first (longest processing time first)."""
    groups = _groups(names)
    processes = min(ctx.workers, os.cpu_count() or 1)
    share = sum(cost.values()) / max(processes, 1)
    solo = [g for g in groups if any(n in _PARALLEL and cost[n] > share for n in g)]
    pooled = sorted((g for g in groups if g not in solo), key=lambda g: -sum(cost[n] for n in g))
    processes = min(processes, len(pooled))
    if processes <= 1:
        solo, pooled = [g for g in groups if g in solo or g in pooled], []
    return solo, pooled, processes


# layer steps typical of the study, `(runs, n, d)`: two-token and eight-token sweeps
_TYPICAL_STEPS = ((200, 2, 4), (200, 8, 3))
# the calibrated time model over `DEFAULT_TIME_MODEL` on TYPICAL_STEPS, measured on machine A (the
# 2-vCPU Intel Xeon guest of docs/benchmarks.md, idle), where SECTION_CPU_S was measured: machine
# A's speed is 1
_REFERENCE_RATIO = 3.16


def _machine_speed() -> tuple[float, str]:
    """How many times longer work takes here than on machine A, where SECTION_CPU_S was measured:
    this machine's calibrated time model (`io.calibration.time_model`) over
    `budget.DEFAULT_TIME_MODEL` on the layer steps of TYPICAL_STEPS, divided by the same ratio on
    A (REFERENCE_RATIO), within [0.2, 20]; 1 when there is no calibration."""
    from ..io.calibration import time_model
    from ..sim.budget import DEFAULT_TIME_MODEL, estimate_work

    model = time_model()
    if model.source != "calibrated on this machine":
        return 1.0, "section times of the reference 2-core machine; this one not calibrated"
    steps = [(1.0, estimate_work(runs, 1, n, d)) for runs, n, d in _TYPICAL_STEPS]
    ratio = (sum(model.seconds(*s) for s in steps)
             / sum(DEFAULT_TIME_MODEL.seconds(*s) for s in steps))
    ratio = min(20.0, max(0.2, ratio / _REFERENCE_RATIO))
    return ratio, (f"section times of the reference 2-core machine x {ratio:.2g}, this "
                   "machine's calibrated speed; less when saved results are reused")


def _estimate(names: Sequence[str], ctx: Context) -> tuple[float, str]:
    """`(seconds, source)`: the wall time of building `names` on an otherwise idle machine: the
    solo groups' CPU over the workers, then the pool's longest-processing-time-first schedule
    (each group on the process that frees first), plus the pool's start, times
    `machine_speed()`."""
    cost = _section_cpu(names, ctx)
    solo, pooled, processes = _plan(names, ctx, cost)
    wall = sum(sum(cost[n] for n in g) / (ctx.workers if any(n in _PARALLEL for n in g) else 1)
               for g in solo)
    if pooled:
        free = [_START_S] * processes
        for g in pooled:
            k = free.index(min(free))
            free[k] += sum(cost[n] for n in g)
        wall += max(free)
    speed, source = _machine_speed()
    return wall * speed, source


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _timed_build(name: str, ctx: Context) -> Section:
    """`build_section`, with the CPU seconds it took (this process and the processes it ran) in
    its provenance as `cpu_s`."""
    c0 = _cpu_s()
    sec = build_section(name, ctx)
    sec.provenance.setdefault("cpu_s", round(_cpu_s() - c0, 2))
    return sec


def _build_group(names: Sequence[str], out: str, size: str, seed: int, yes: bool,
                 force: bool) -> list[tuple[Section, list[str]]]:
    """In a pool process: build the sections `names` one after the other on this process alone
    (`workers = 1`, no progress bars); each with the lines it logged."""
    done = []
    for name in names:
        lines: list[str] = []
        ctx = Context(Path(out), size, seed, 1, progress=False, log=lines.append, yes=yes,
                      force=force)
        done.append((_timed_build(name, ctx), lines))
    return done


def _build_sections(names: Sequence[str], ctx: Context) -> dict[str, Section]:
    """The sections `names` by name (`_plan`): the solo groups here on `ctx.workers`, then the
    other groups on a pool of processes, costliest first; a group whose process fails becomes
    failed sections."""
    cost = _section_cpu(names, ctx)
    solo, pooled, processes = _plan(names, ctx, cost)
    built: dict[str, Section] = {}

    def done(sec: Section, lines: Sequence[str] = ()) -> None:
        for line in lines:
            ctx.log(f"[{sec.key}] {line}")
        ctx.log(f"[{sec.key}] {sec.status} in {sec.provenance.get('wall_s', 0):.1f} s "
                f"({sec.provenance.get('cpu_s', 0):.1f} s CPU)")
        built[sec.key] = sec

    with _one_torch_thread():
        for group in solo:
            for name in group:
                ctx.log(f"[{name}] building" + (f" on {ctx.workers} processes"
                                                if name in _PARALLEL and ctx.workers > 1 else ""))
                done(_timed_build(name, ctx))
    if not pooled:
        return built
    import multiprocessing as mp

    ctx.log(f"building {', '.join(n for g in pooled for n in g)} on {processes} processes")
    pool = ProcessPoolExecutor(processes, mp_context=mp.get_context("spawn"),
                               initializer=_one_thread)
    try:
        futures: dict[Future[Any], list[str]] = {
            pool.submit(_build_group, g, str(ctx.out), ctx.size, ctx.seed, ctx.yes, ctx.force): g
            for g in pooled}
        while futures:
            finished, _ = wait(list(futures), return_when=FIRST_COMPLETED)
            for fut in finished:
                group = futures.pop(fut)
                t0 = time.perf_counter()
                try:
                    for sec, lines in fut.result():
                        done(sec, lines)
                except Exception as err:  # the process died or its result did not come back
                    for name in group:
                        spec = FIGURES[name]
                        done(Section(name, spec.title, spec.claim, status="failed",
                                     note=f"Building this section failed: {type(err).__name__}: "
                                          f"{err}. {_remedy(name, ctx)}",
                                     provenance={"wall_s": round(time.perf_counter() - t0, 2)}))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return built
