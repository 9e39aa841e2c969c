"""Every figure of the study, then one self-contained HTML report (`tokensde reproduce`).

Each figure reuses its saved result under `DIR/data/` (and finished sweep cells under
`DIR/sweeps/`), so a second call only redraws, and an interrupted call resumes. A figure whose
build fails becomes a section that says so; the report is written either way.
`DIR/reproduce.json` records each section's status and wall time.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ..io.report import Section, check_report_path, write_report
from ..io.store import check_output, header, write_json
from ..model.params import ParameterError
from .context import Context
from .registry import FIGURES, build_section

KIND_RUN = "tokensde.reproduce"


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
        force: Replace an `out/report.html` that tokensde did not write.
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
    report = check_report_path(Path(out) / "report.html", "out", force)
    check_output(Path(out) / "reproduce.json", "out", suffixes=(".json",))
    ctx = Context(Path(out), size, seed, workers, log=log, yes=yes)
    t0 = time.perf_counter()
    sections = []
    for name in names:
        log(f"[{name}] building")
        sec = build_section(name, ctx)
        log(f"[{name}] {sec.status} in {sec.provenance.get('wall_s', 0):.1f} s")
        sections.append(sec)
    wall = time.perf_counter() - t0
    reused = sum(bool(s.provenance.get("reused")) for s in sections)
    record = {
        "size": size, "seed": seed, "workers": workers, "wall_s": round(wall, 1),
        "cpus": os.cpu_count(), "python": platform.python_version(), "version": __version__,
        "command": (f"tokensde reproduce --{size} --out {out}" if size != "tiny" else
                    f"tokensde reproduce --size tiny --out {out}")
        + (f" --only {','.join(only)}" if only else "")
        + (f" --skip {','.join(skip)}" if skip else ""),
        "reused_sections": reused,
        "sections": {s.key: {"status": s.status, "wall_s": s.provenance.get("wall_s"),
                             "reused": s.provenance.get("reused"),
                             "note": s.note if s.status != "ok" else ""} for s in sections},
        "failed": {s.key: s.note for s in sections if s.status == "failed"},
    }
    write_json(ctx.out / "reproduce.json", header(KIND_RUN, **record))
    meta = {"size": size, "seed": seed, "workers": workers,
            "wall time": f"{wall / 60:.1f} min",
            "saved results reused": f"{reused} of {len(sections)} sections",
            "command": record["command"]}
    path = write_report(sections, report, meta=meta, force=force,
                        title="tokensde: token dynamics of deep random Transformers")
    return path, sections, record
