"""Compare two result folders of `tokensde reproduce` table by table, column by column.

    python diagnostics/compare_reproductions.py OLD NEW [--cells] [--markdown]

Reads every table both folders wrote (parquet, csv, json, jsonl, npz, md; with `--cells` also
each sweep cell's own parquet, otherwise the cells enter through their sweep's table and are
compared by name, that is by sweep id) and prints, for each table, each column (json: each
numeric leaf, npz: each array) whose values differ: the largest absolute difference, or the
number of differing entries of a text column. Columns that hold a clock or a version (`VOLATILE`)
are listed apart. Files written by only one folder are listed by name. Exit status 0 always: the
reading of the differences is the reader's.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

TABLES = (".parquet", ".csv", ".json", ".jsonl", ".npz", ".md")
VOLATILE = re.compile(r"(^|[._/])(wall_s|wall|train_s|seconds|elapsed|version|package_version|"
                      r"created|finished|started|date|time_s|host|device|threads|out|path|dir|"
                      r"reused|timings?)($|[._/\[])")


def tables(root: Path, cells: bool) -> dict[str, Path]:
    """The table files under `root`, by path relative to it."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and p.suffix in TABLES and (cells or "/cells/" not in rel):
            out[rel] = p
    return out


def cell_ids(root: Path) -> dict[str, set[str]]:
    """The cell ids (file stems) of each sweep folder under `root`."""
    ids: dict[str, set[str]] = {}
    for p in root.rglob("cells/*.parquet"):
        ids.setdefault(p.parent.parent.relative_to(root).as_posix(), set()).add(p.stem)
    return ids


def _leaves(obj: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{key}.{k}" if key else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, f"{key}[{i}]")
    else:
        yield key, obj


def _frame(p: Path) -> pd.DataFrame | dict[str, Any]:
    if p.suffix == ".parquet":
        return pd.read_parquet(p)
    if p.suffix == ".csv":
        return pd.read_csv(p)
    if p.suffix == ".jsonl":
        return {f"line{i}.{k}": v for i, line in enumerate(p.read_text().splitlines()) if line
                for k, v in _leaves(json.loads(line))}
    if p.suffix == ".json":
        return dict(_leaves(json.loads(p.read_text())))
    if p.suffix == ".npz":  # arrays, and the leaves of a JSON header stored as a string
        out: dict[str, Any] = {}
        with np.load(p, allow_pickle=False) as z:
            for k in z.files:
                v = z[k]
                if v.dtype.kind == "U" and v.ndim == 0 and str(v).startswith("{"):
                    out.update({f"{k}.{key}": x for key, x in _leaves(json.loads(str(v)))})
                else:
                    out[k] = v
        return out
    return {f"line{i}": line for i, line in enumerate(p.read_text().splitlines())}


def _diff(a: Any, b: Any) -> tuple[str, float | int] | None:
    """('abs', max abs diff) of numbers, ('count', unequal entries) of anything else; None: equal."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return "shape", max(a.size, b.size)
    if a.dtype.kind in "biuf" and b.dtype.kind in "biuf":
        a, b = a.astype(float), b.astype(float)
        both = np.isnan(a) & np.isnan(b)
        d = np.where(both, 0.0, np.abs(a - b))
        m = float(np.nanmax(d, initial=0.0)) if d.size else 0.0
        if np.isnan(d).any():
            m = math.inf  # a NaN on one side only
        return None if m == 0.0 else ("abs", m)
    ne = int(sum(str(x) != str(y) for x, y in zip(a.ravel(), b.ravel(), strict=True)))
    return None if ne == 0 else ("count", ne)


def compare(old: Path, new: Path) -> list[tuple[str, str, str, float | int]]:
    """`(column, kind, size)` of each differing column of the tables `old` and `new`; a column
    in one only is ('only old' / 'only new', rows)."""
    a, b = _frame(old), _frame(new)
    if isinstance(a, pd.DataFrame) and isinstance(b, pd.DataFrame):
        cols_a, cols_b = list(a.columns), list(b.columns)
        if len(a) != len(b):
            return [("<rows>", "shape", len(a), len(b))]
        get_a = lambda c: a[c].to_numpy()  # noqa: E731
        get_b = lambda c: b[c].to_numpy()  # noqa: E731
    else:
        cols_a, cols_b = list(a), list(b)
        get_a, get_b = a.__getitem__, b.__getitem__
    out: list[tuple[str, str, str, float | int]] = []
    for c in cols_a:
        if c not in cols_b:
            out.append((str(c), "only old", "", 0))
            continue
        d = _diff(get_a(c), get_b(c))
        if d is not None:
            out.append((str(c), d[0], "", d[1]))
    out += [(str(c), "only new", "", 0) for c in cols_b if c not in cols_a]
    return out


def two_token_rule(old: Path, new: Path) -> str | None:
    """For a two-token table: whether the counts agree and `p_anti`, `p_merged` are now over the
    decided runs (`antipodal / (antipodal + merged)`) and were over all runs before."""
    if old.suffix != ".parquet":
        return None
    a, b = pd.read_parquet(old), pd.read_parquet(new)
    need = {"antipodal", "merged", "undecided", "p_anti", "p_merged", "runs"}
    if not need <= set(a.columns) & set(b.columns) or len(a) != len(b):
        return None
    a, b = a.sort_values("cell").reset_index(drop=True), b.sort_values("cell").reset_index(drop=True)
    counts = all((a[c].to_numpy() == b[c].to_numpy()).all()
                 for c in ("cell", "antipodal", "merged", "undecided"))
    decided = (b["antipodal"] + b["merged"]) / b["runs"]
    with np.errstate(invalid="ignore", divide="ignore"):
        new_rule = np.allclose(b["p_anti"], b["antipodal"] / b["runs"] / decided, equal_nan=True,
                               rtol=0, atol=1e-12)
        old_rule = np.allclose(a["p_anti"], a["antipodal"] / a["runs"], rtol=0, atol=1e-12)
    undecided = int((b["undecided"] > 0).sum())
    return (f"counts (antipodal, merged, undecided) {'identical' if counts else 'DIFFER'} by cell; "
            f"p_anti = antipodal/decided now: {new_rule}, antipodal/runs before: {old_rule}; "
            f"cells with undecided runs: {undecided} of {len(b)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--cells", action="store_true", help="also compare every sweep cell's file")
    a = ap.parse_args()
    ta, tb = tables(a.old, a.cells), tables(a.new, a.cells)
    print(f"tables: {len(ta)} old, {len(tb)} new, {len(set(ta) & set(tb))} in both")
    for rel in sorted(set(ta) - set(tb)):
        print(f"  only old: {rel}")
    for rel in sorted(set(tb) - set(ta)):
        print(f"  only new: {rel}")
    ca, cb = cell_ids(a.old), cell_ids(a.new)
    for sweep in sorted(set(ca) | set(cb)):
        same = ca.get(sweep, set()) == cb.get(sweep, set())
        print(f"sweep ids {sweep}: {len(ca.get(sweep, ()))} old, {len(cb.get(sweep, ()))} new, "
              f"{'identical' if same else 'DIFFERENT'}")
    identical = []
    for rel in sorted(set(ta) & set(tb)):
        diffs = compare(ta[rel], tb[rel])
        real = [d for d in diffs if not VOLATILE.search(d[0])]
        clock = [d[0] for d in diffs if VOLATILE.search(d[0])]
        if not real:
            identical.append(rel)
            if not clock:
                print(f"{rel}: identical")
            else:
                print(f"{rel}: identical (clock/version columns differ: {', '.join(clock[:6])}"
                      f"{' ...' if len(clock) > 6 else ''})")
            continue
        print(f"{rel}: {len(real)} column(s) differ")
        rule = two_token_rule(ta[rel], tb[rel])
        if rule:
            print(f"    [{rule}]")
        for col, kind, _, size in real[:40]:
            what = f"max |diff| = {size:.3g}" if kind == "abs" else f"{kind}: {size}"
            print(f"    {col:40s} {what}")
        if len(real) > 40:
            print(f"    ... and {len(real) - 40} more")
    print(f"identical tables (up to clock/version columns): {len(identical)} of "
          f"{len(set(ta) & set(tb))}")


if __name__ == "__main__":
    main()
