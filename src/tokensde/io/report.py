"""A self-contained HTML report: one section per claim, figures embedded, every number traceable.

`render(sections, meta)` is pure (dataclasses in, an HTML string out); `write_report` writes it
atomically. Figures are embedded as base64 data URIs (PNG or GIF), so the file opens anywhere
without its results directory. Each table carries, per row, the parameters, seed, package version
and the interval of its numbers; each section says what the claim is and what evidence backs it,
or, when a piece is missing, exactly what is missing.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..model.checks import ParameterError
from .store import atomic_write, check_output

_STATUSES: tuple[str, ...] = ("ok", "partial", "disagrees", "missing", "failed")
_MIME = {".png": "image/png", ".gif": "image/gif", ".svg": "image/svg+xml", ".jpg": "image/jpeg"}


@dataclass
class Image:
    """A figure to embed: a file (PNG/GIF/SVG/JPEG) and its caption."""

    path: Path
    caption: str = ""
    alt: str = ""

    def data_uri(self) -> str:
        """`data:<mime>;base64,...` of the file."""
        mime = _MIME.get(self.path.suffix.lower())
        if mime is None:
            raise ValueError(f"cannot embed {self.path}: suffix must be one of {', '.join(_MIME)}")
        return f"data:{mime};base64," + base64.b64encode(self.path.read_bytes()).decode("ascii")


@dataclass
class Table:
    """A table: column names and rows of plain values (numbers are formatted on render)."""

    key: str
    caption: str
    columns: list[str]
    rows: list[list[Any]]
    note: str = ""
    flagged: list[int] = field(default_factory=list)  # rows to mark (interval excludes theory)

    def __post_init__(self) -> None:
        bad = [i for i, r in enumerate(self.rows) if len(r) != len(self.columns)]
        if bad:
            raise ValueError(f"table {self.key!r}: rows {bad} do not have {len(self.columns)} "
                             "cells")


@dataclass
class Section:
    """One claim of the study with its evidence.

    `status`: 'ok', 'partial' (some evidence missing), 'disagrees' (more intervals exclude the
    theory than chance explains, `stats.chance_explains`), 'missing' (no evidence: say what is
    needed in `note`) or 'failed' (an error while producing it: `note` holds the message).
    `provenance`: parameters, seeds, sizes and commands behind the section (rendered as JSON).
    """

    key: str
    title: str
    claim: str
    status: str = "ok"
    note: str = ""
    images: list[Image] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in _STATUSES:
            raise ValueError(f"section status must be one of {', '.join(_STATUSES)}; got "
                             f"{self.status!r}")


def _fmt(value: Any, digits: int = 4) -> str:
    """A table cell: floats to `digits` significant digits, intervals `[lo, hi]`, None as '—'."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        if value == 0:
            return "0"
        if 1e-3 <= abs(value) < 1e5:
            return f"{value:.{digits}g}"
        return f"{value:.{max(digits - 1, 1)}e}"
    if isinstance(value, tuple) and len(value) == 2:
        return f"[{_fmt(value[0], digits)}, {_fmt(value[1], digits)}]"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def _interval(lo: Any, hi: Any) -> tuple[Any, Any] | None:
    """An interval cell, or None when either end is missing."""
    return None if lo is None or hi is None else (lo, hi)


_CSS = """
:root { --ink:#1d2430; --muted:#5b6576; --line:#dfe3ea; --bg:#fbfbfd; --accent:#1f5a99;
        --ok:#2c7a4b; --partial:#9a6b00; --missing:#a33a2e; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
       font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif; }
header { background:#fff; border-bottom:1px solid var(--line); padding:28px 0 18px; }
main, .wrap { max-width:1120px; margin:0 auto; padding:0 28px; }
h1 { font-size:26px; margin:0 0 6px; letter-spacing:-0.01em; }
h2 { font-size:20px; margin:0 0 4px; }
h3 { font-size:15px; margin:18px 0 6px; color:var(--muted); }
.sub { color:var(--muted); margin:0; }
nav { margin-top:14px; display:flex; flex-wrap:wrap; gap:6px 8px; }
nav a { font-size:13px; text-decoration:none; color:var(--accent); border:1px solid var(--line);
        padding:2px 10px; border-radius:999px; background:#fff; }
section { background:#fff; border:1px solid var(--line); border-radius:10px;
          margin:22px 0; padding:22px 24px; }
.claim { border-left:4px solid var(--accent); background:#f3f6fb; padding:8px 14px; margin:10px 0;
         border-radius:0 6px 6px 0; }
.badge { display:inline-block; font-size:11px; font-weight:600; text-transform:uppercase;
         letter-spacing:.05em; padding:1px 8px; border-radius:4px; color:#fff; margin-left:8px;
         vertical-align:middle; }
.badge.ok { background:var(--ok); } .badge.partial { background:var(--partial); }
.badge.missing, .badge.failed, .badge.disagrees { background:var(--missing); }
tr.outside td { background:#fbe9e7; }
.note { color:var(--muted); white-space:pre-wrap; }
.note.missing, .note.failed, .note.disagrees { color:var(--missing); }
figure { margin:16px 0; text-align:center; }
figure img { max-width:100%; height:auto; border:1px solid var(--line); border-radius:6px;
             background:#fff; }
figcaption { color:var(--muted); font-size:13px; margin-top:6px; text-align:left; }
.tablewrap { overflow:auto; max-height:460px; margin:8px 0 4px; border:1px solid var(--line);
             border-radius:6px; }
table { border-collapse:collapse; font-size:13px; width:100%; }
.tcap { color:var(--muted); font-size:13px; margin:14px 0 4px; }
th, td { padding:5px 9px; border-bottom:1px solid var(--line); text-align:left;
         vertical-align:top; }
th { background:#f4f6f9; font-weight:600; position:sticky; top:0; }
td.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
tbody tr:nth-child(even) { background:#fafbfc; }
details { margin-top:12px; } summary { cursor:pointer; color:var(--accent); font-size:13px; }
pre { background:#f4f6f9; padding:10px 12px; border-radius:6px; overflow-x:auto; font-size:12px; }
footer { color:var(--muted); font-size:12px; padding:10px 0 40px; }
"""


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float | tuple) and not isinstance(v, bool)


def _table(t: Table) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in t.columns)
    body = []
    flagged = set(t.flagged)
    for i, row in enumerate(t.rows):
        cells = "".join(f'<td class="num">{e(_fmt(v))}</td>' if _is_num(v) else
                        f"<td>{e(_fmt(v))}</td>" for v in row)
        mark = ' class="outside"' if i in flagged else ""
        body.append(f"<tr{mark}>{cells}</tr>")
    note = f'<p class="note">{e(t.note)}</p>' if t.note else ""
    return (f'<p class="tcap">{e(t.caption)}</p>'
            f'<div class="tablewrap"><table id="table-{e(t.key)}" data-rows="{len(t.rows)}">'
            f"<thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>{note}")


def _image(im: Image) -> str:
    e = html.escape
    alt = e(im.alt or im.caption or im.path.name)
    cap = f"<figcaption>{e(im.caption)}</figcaption>" if im.caption else ""
    return f'<figure><img src="{im.data_uri()}" alt="{alt}" data-name="{e(im.path.name)}">' \
           f"{cap}</figure>"


def _section(s: Section) -> str:
    e = html.escape
    parts = [f'<section id="{e(s.key)}" data-status="{e(s.status)}">',
             f'<h2>{e(s.title)}<span class="badge {e(s.status)}">{e(s.status)}</span></h2>',
             f'<p class="claim">{e(s.claim)}</p>']
    if s.note:
        parts.append(f'<p class="note {e(s.status)}">{e(s.note)}</p>')
    parts += [_image(im) for im in s.images]
    parts += [_table(t) for t in s.tables]
    if s.provenance:
        prov = json.dumps(s.provenance, indent=2, sort_keys=True, default=str)
        parts.append(f"<details><summary>parameters, seeds and commands</summary>"
                     f"<pre>{e(prov)}</pre></details>")
    parts.append("</section>")
    return "\n".join(parts)


def _render(sections: Sequence[Section], title: str = "tokensde report",
           meta: dict[str, Any] | None = None) -> str:
    """The whole report as one HTML document (no external resources)."""
    e = html.escape
    meta = {"package": "tokensde", "version": __version__, **(meta or {})}
    sub = " · ".join(f"{k}: {v}" for k, v in meta.items() if not isinstance(v, dict | list))
    nav = "".join(f'<a href="#{e(s.key)}">{e(s.title)}</a>' for s in sections)
    counts = {st: sum(s.status == st for s in sections) for st in _STATUSES}
    summary = ", ".join(f"{n} {st}" for st, n in counts.items() if n)
    body = "\n".join(_section(s) for s in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tokensde {e(__version__)}">
<title>{e(title)}</title><style>{_CSS}</style></head>
<body><header><div class="wrap"><h1>{e(title)}</h1>
<p class="sub">{e(sub)}</p><p class="sub">sections: {e(summary)}</p>
<nav>{nav}</nav></div></header>
<main>{body}</main>
<footer><div class="wrap">Generated by tokensde {e(__version__)}. Intervals are 95% unless a
column says otherwise. Every figure is embedded in this file.</div></footer>
</body></html>
"""


_MARKS = (b'<meta name="generator" content="tokensde', b"Generated by tokensde")


def _written_by_us(path: str | os.PathLike) -> bool:
    """True when the file at `path` is a report that `render` wrote (its generator tag near the
    start, or its footer near the end, for reports of earlier versions)."""
    with open(path, "rb") as fh:
        head = fh.read(2048)
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - 2048))
        tail = fh.read()
    return _MARKS[0] in head or _MARKS[1] in tail


def _check_report_path(path: str | os.PathLike, name: str = "path", force: bool = False) -> Path:
    """`path` if a report may be written there: writable (`check_output`, `.html`), and either
    absent, a report of ours, or `force` given; ParameterError naming `name` otherwise."""
    path = check_output(path, name, suffixes=(".html", ".htm"))
    if path.exists() and not force and not _written_by_us(path):
        raise ParameterError(f"{name}: {path} exists and was not written by tokensde; refusing "
                             "to overwrite it (move it away, choose another directory, or give "
                             "--force)")
    return path


def write_report(sections: Sequence[Section], path: str | os.PathLike,
                 title: str = "tokensde report", meta: dict[str, Any] | None = None,
                 force: bool = False) -> Path:
    """Render and write the report atomically (refusing to replace a file that is not a
    tokensde report unless `force`, `check_report_path`); return its path.

    Args:
        sections: The report's sections, in order.
        path: The HTML file to write.
        title: Title of the page.
        meta: Run metadata shown in the header, or None.
        force: Replace a file at `path` that tokensde did not write.

    Returns:
        The path written.
    """
    _check_report_path(path, "report path", force)
    text = _render(sections, title, meta)
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
