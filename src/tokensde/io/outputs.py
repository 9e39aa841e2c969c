"""The output guard shared by every command that writes results: finished work is never replaced
by accident.

A command's output (a file, or a folder of results) may be written when it does not exist yet;
an existing file, or a non-empty folder, is refused unless the command is told to replace it
(`--force`) or resumes it (a sweep folder of the same sweep, checked by the sweep itself). No
output may land inside a sweep's own folder (a folder holding the manifest `_SWEEP_MANIFEST`), whose
contents the sweep owns. `clear_results` empties a folder for `--force`, deleting only what
tokensde wrote there.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

from ..model.params import ParameterError
from .store import _PARQUET_META_KEY, _check_path_type, check_output

_SWEEP_MANIFEST = "sweep.json"  # the file that marks a sweep's folder (docs/sweeps.md)
_SHOWN = 3  # names listed in a refusal


def _is_ours_scratch(p: Path) -> bool:
    """A lock file or an interrupted atomic write of ours: an empty dotfile, or `.*.tmp`."""
    return p.is_file() and p.name.startswith(".") and (p.name.endswith(".tmp")
                                                       or p.stat().st_size == 0)


def _enclosing_sweep(path: str | os.PathLike) -> Path | None:
    """The sweep folder strictly above `path` (a parent holding `_SWEEP_MANIFEST`), or None.

    Args:
        path: An output path (it need not exist).

    Returns:
        The nearest such folder, or None when `path` is not inside a sweep's folder.
    """
    _check_path_type(path, "path")
    for above in Path(os.path.abspath(path)).parents:
        if (above / _SWEEP_MANIFEST).is_file():
            return above
    return None


def _is_sweep_dir(path: str | os.PathLike) -> bool:
    """Whether `path` is a sweep's folder (it holds `_SWEEP_MANIFEST`).

    Args:
        path: A folder (it need not exist).

    Returns:
        True when `path/SWEEP_MANIFEST` is a file.
    """
    _check_path_type(path, "path")
    return (Path(path) / _SWEEP_MANIFEST).is_file()


def _written_by_tokensde(path: str | os.PathLike) -> bool:
    """Whether the file at `path` carries a tokensde header (`store.header`): Parquet with the
    tokensde schema metadata, JSON whose `package` is 'tokensde', or an `.npz` with a `meta`
    entry; anything unreadable counts as not ours.

    Args:
        path: A file.

    Returns:
        True for a results file that tokensde wrote.
    """
    _check_path_type(path, "path")
    p = Path(path)
    try:
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            return _PARQUET_META_KEY in (pq.read_schema(p).metadata or {})
        if p.suffix == ".json":
            doc = json.loads(p.read_text())
            return isinstance(doc, dict) and doc.get("package") == "tokensde"
        if p.suffix == ".npz":
            with zipfile.ZipFile(p) as z:
                return "meta.npy" in z.namelist()
    except Exception:  # unreadable or damaged (pyarrow raises its own kinds): not ours
        return False
    return False


def _listing(path: Path) -> list[str]:
    """The entries of folder `path` that are not scratch files of ours."""
    return sorted(p.name for p in path.iterdir() if not _is_ours_scratch(p))


def _guard_output(path: str | os.PathLike, name: str, *, directory: bool = False,
                 force: bool = False, resumable: bool = False,
                 suffixes: tuple[str, ...] | None = None) -> Path:
    """`path` if a command may write its results there, checked before any work: writable
    (`store.check_output`), not inside a sweep's folder, and either absent, an empty folder, a
    sweep folder the command resumes (`resumable`; the sweep checks it is the same sweep), or
    `force` given. ParameterError, one line naming option `name` and what to do, otherwise;
    nothing is created or removed.

    Args:
        path: The output file or folder.
        name: The option that sets it, e.g. '--out'.
        directory: The output is a folder of results (else a file).
        force: Replacing what is there is allowed.
        resumable: The command resumes a sweep folder at `path`.
        suffixes: Allowed file suffixes (lower case, with the dot), or None.

    Returns:
        `path`, as a `Path`.
    """
    where = check_output(path, name, directory=directory, suffixes=suffixes)
    sweep = _enclosing_sweep(where)
    if sweep is not None:
        raise ParameterError(f"{name}: {where} lies inside the sweep folder {sweep}, whose files "
                             f"the sweep owns; choose a {name} outside it")
    if force or not where.exists():
        return where
    if not directory:
        raise ParameterError(f"{name}: {where} exists; choose another {name}, or pass --force "
                             "to replace it")
    if resumable and _is_sweep_dir(where):
        return where
    held = _listing(where)
    if held:
        more = f" and {len(held) - _SHOWN} more" if len(held) > _SHOWN else ""
        raise ParameterError(f"{name}: {where} is not empty (it holds "
                             f"{', '.join(held[:_SHOWN])}{more}); choose another {name}, or "
                             "pass --force to replace the results there")
    return where


def _clear_results(path: str | os.PathLike, name: str) -> list[Path]:
    """Empty folder `path` of what tokensde wrote there (results files with a tokensde header,
    `written_by_tokensde`; lock and temporary files; folders holding only those), for `--force`.
    Refuses, removing nothing, when anything else is there: ParameterError naming `name`.

    Args:
        path: The output folder (absent: nothing to do).
        name: The option that sets it, e.g. '--out'.

    Returns:
        The entries removed.
    """
    _check_path_type(path, name)
    root = Path(path)
    if not root.is_dir():
        return []
    foreign = [p for p in root.rglob("*") if p.is_file() and not _is_ours_scratch(p)
               and not _written_by_tokensde(p)]
    foreign += [p for p in root.rglob("*") if not p.is_file() and not p.is_dir()]  # links, fifos
    if foreign:
        names = ", ".join(str(p.relative_to(root)) for p in sorted(foreign)[:_SHOWN])
        raise ParameterError(f"{name}: {root} holds files that tokensde did not write ({names}"
                             f"{', ...' if len(foreign) > _SHOWN else ''}); --force replaces only "
                             f"tokensde results: move them away or choose another {name}")
    removed = []
    for p in sorted(root.iterdir()):
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
        removed.append(p)
    return removed
