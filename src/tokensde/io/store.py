"""Results on disk: every file carries its parameters, seed, package version and a schema version.

Simulation results are `.npz` archives with a JSON `meta` entry. Writes are atomic (temporary
file + rename), and loading a corrupt, foreign or newer-schema file raises `StoreError`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..model.params import ModelParams, ParameterError, TimeGrid
from ..sim.result import SimResult

_SCHEMA = 1
_KIND_SIM = "tokensde.simulation"
_OBSERVED = "observed/"  # prefix of the observers' arrays in a results file


class StoreError(ValueError):
    """A results file that cannot be read: corrupt, foreign, or written by a newer schema."""


def _check_path_type(path: Any, name: str) -> None:
    """TypeError naming `name` unless `path` is a str or an os.PathLike (not bytes, a number or
    None)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{name} must be a file path (str or os.PathLike); got "
                        f"{type(path).__name__}")


def check_output(path: str | os.PathLike, name: str, directory: bool = False,
                 suffixes: tuple[str, ...] | None = None) -> Path:
    """`path` if a file (or, with `directory`, a directory) can be written there; nothing is created.

    It is not the other kind of thing, no part of it above is a file, the nearest existing
    directory above is writable (permissions and a read-only mount), and its suffix is one of
    `suffixes` (lower case, with the dot) when given; else ParameterError naming `name`.

    Args:
        path: The output path.
        name: The option or parameter named in the error (`--out`).
        directory: Whether `path` is a directory (else a file).
        suffixes: The allowed suffixes, or None for any.

    Returns:
        `path` as a `Path`.
    """
    _check_path_type(path, name)
    path = Path(path)
    want = "a directory" if directory else "a file path"
    if path.exists() and path.is_dir() != directory:
        what = "a directory" if path.is_dir() else "a file"
        raise ParameterError(f"{name} must be {want}; {path} is {what}")
    if directory and path.is_dir():
        _check_writable(path, path, name)
        return path
    for above in path.parents:
        if above.exists():
            if not above.is_dir():
                raise ParameterError(f"{name} must be {want}; {path} sits under {above}, "
                                     "which is a file")
            _check_writable(path, above, name)
            break
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise ParameterError(f"{name} must end in one of {', '.join(suffixes)}; got {str(path)!r}")
    return path


def _check_writable(path: Path, where: Path, name: str) -> None:
    """ParameterError naming `name` unless files can be created in the directory `where`."""
    readonly = False
    with contextlib.suppress(OSError, AttributeError):
        readonly = bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    if readonly or not os.access(where, os.W_OK | os.X_OK):
        why = "a read-only file system" if readonly else "permission denied"
        raise ParameterError(f"{name}: cannot write {path}: {where} is not writable ({why})")


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call `write(tmp)` on a temporary file next to `path`, then rename it over `path` (what
    `write` returns is ignored).

    Args:
        path: The file to create or replace.
        write: Called with the temporary path; it writes the content there.

    Returns:
        `path`, as a `Path`.
    """
    path = check_output(path, "output path")
    if not callable(write):
        raise TypeError(f"write must be a callable that writes a file at the path it is given; "
                        f"got {type(write).__name__}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _check_meta(meta: Any, kind: str, where: str) -> dict[str, Any]:
    """Validate the header of a stored object: right kind, schema not newer than ours."""
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        found = meta.get("kind") if isinstance(meta, dict) else type(meta).__name__
        raise StoreError(f"{where} is not a {kind} file (found kind {found!r})")
    schema = meta.get("schema")
    if not isinstance(schema, int) or schema < 1:
        raise StoreError(f"{where} has no valid schema version (found {schema!r})")
    if schema > _SCHEMA:
        raise StoreError(f"{where} was written with schema {schema} by tokensde "
                         f"{meta.get('version')}; this tokensde {__version__} reads up to {_SCHEMA}")
    return meta


def _read_json(path: str | os.PathLike, kind: str, remedy: str) -> dict[str, Any]:
    """A JSON document of `kind` (see `header`); StoreError naming the file and `remedy` when it
    is truncated, corrupt or foreign."""
    _check_path_type(path, "path")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise StoreError(f"{path} is not readable JSON (truncated or corrupt?): {err}; "
                         f"{remedy}") from err
    try:
        return _check_meta(doc, kind, str(path))
    except StoreError as err:
        raise StoreError(f"{err}; {remedy}") from err


def _to_jsonable(obj: Any) -> Any:
    """Convert numpy / torch scalars and arrays (and nan) to plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _to_jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def write_json(path: str | os.PathLike, doc: Any, indent: int = 1) -> Path:
    """Write `doc` (made JSON-ready by `to_jsonable`) to `path` atomically.

    Args:
        path: The file to write.
        doc: The document (numpy scalars and arrays are converted).
        indent: JSON indentation.

    Returns:
        The path written.
    """
    return atomic_write(path, lambda tmp: tmp.write_text(json.dumps(_to_jsonable(doc),
                                                                    indent=indent)))


def header(kind: str, **fields: Any) -> dict[str, Any]:
    """A metadata header with kind, schema and package version.

    Args:
        kind: What the file holds, e.g. 'tokensde.vit.geometry'.
        **fields: Further entries of the header (parameters, seed, ...).

    Returns:
        `{"kind", "schema", "package", "version", **fields}`.
    """
    return {"kind": kind, "schema": _SCHEMA, "package": "tokensde", "version": __version__, **fields}


def save_result(result: SimResult, path: str | os.PathLike) -> Path:
    """Write a `SimResult` to `path` (.npz): arrays (the observers' outputs included) plus JSON
    metadata.

    Args:
        result: What `simulate` returned.
        path: The `.npz` file to write.

    Returns:
        The path written.

    Raises:
        TypeError: `result` is not a `SimResult`, or `path` is not a path.
    """
    if not isinstance(result, SimResult):
        raise TypeError(f"result must be a SimResult (what simulate returns); got "
                        f"{type(result).__name__}")
    _check_path_type(path, "path")
    check_output(path, "path", suffixes=(".npz",))
    meta = header(_KIND_SIM, **result.metadata())
    arrays: dict[str, np.ndarray] = {"x": np.asarray(result.state), "checkpoints": result.checkpoints}
    if result.gram is not None:
        arrays["gram"] = np.asarray(result.gram)
    if result.tokens is not None:
        arrays["tokens"] = np.asarray(result.tokens)
    for name, a in result.observed.items():  # the observers' outputs (simulate(observe=...))
        arrays[_OBSERVED + name] = np.asarray(a)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            # numpy's stub: a **dict might hold `allow_pickle`, so mypy cannot match it
            np.savez_compressed(fh, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]

    return atomic_write(path, write)


def load_result(path: str | os.PathLike) -> SimResult:
    """Read a `SimResult` written by `save_result`; raise StoreError on a bad file.

    Args:
        path: A `.npz` file written by `save_result`.

    Returns:
        The `SimResult`.

    Raises:
        StoreError: The file is truncated, foreign or of a newer schema.
    """
    _check_path_type(path, "path")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results file {path} does not exist")
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a tokensde results file (.npz)")
    try:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise StoreError(f"{path} is a single numpy array (.npy), not a tokensde results "
                             "file (.npz written by save_result / simulate --out)")
        with z:
            meta = json.loads(str(z["meta"]))
            data = {k: z[k] for k in z.files if k != "meta"}
    except StoreError:
        raise
    except (zipfile.BadZipFile, OSError, KeyError, ValueError, EOFError) as err:
        raise StoreError(f"{path} is not a readable tokensde results file: {err}") from err
    _check_meta(meta, _KIND_SIM, str(path))
    try:
        _check_arrays(meta, data, str(path))
        return _sim_result(meta, data)
    except KeyError as err:
        raise StoreError(f"{path} lacks the field {err.args[0]!r} of a tokensde results file "
                         "(damaged, or not written by save_result); re-run the simulation") from err
    except (ParameterError, TypeError, ValueError) as err:
        if isinstance(err, StoreError):
            raise
        raise StoreError(f"{path} has a header that is not valid ({err}); damaged, or not "
                         "written by save_result: re-run the simulation") from err


def _check_arrays(meta: dict[str, Any], data: dict[str, np.ndarray], where: str) -> None:
    """Check every array of a results file against its header: `x` `(runs, n, d)`,
    `checkpoints` increasing layer indices in `[0, steps]`, `gram` `(runs, K, n, n)` without
    nan, `tokens` `(runs, K, n, d)`; StoreError naming `where` and the array otherwise."""
    params = meta["params"]
    runs, steps, n, d = meta["runs"], meta["steps"], params["n"], params["d"]
    frame = meta.get("sampler") == "gram"  # the Gram sampler keeps tokens in a smaller frame

    def bad(what: str) -> StoreError:
        return StoreError(f"{where}: {what}; the file is damaged or was edited (re-run the "
                          "simulation that wrote it)")

    def shape(name: str, want: tuple[int, ...]) -> None:
        a = data.get(name)
        if a is None:
            return
        got = tuple(a.shape)
        ok = len(got) == len(want) and got[:-1] == want[:-1] and (
            got[-1] == want[-1] or (frame and name in ("x", "tokens") and got[-1] <= want[-1]))
        if not ok:
            raise bad(f"array {name!r} has shape {got}, but the header says {want} "
                      f"(runs={runs}, n={n}, d={d})")
        if a.dtype.kind not in "fc":
            raise bad(f"array {name!r} holds {a.dtype} values, not floats")

    cp = np.asarray(data["checkpoints"])
    if cp.ndim != 1 or cp.size == 0 or cp.dtype.kind not in "iu":
        raise bad(f"checkpoints must be a non-empty list of layer indices; got shape "
                  f"{cp.shape}, dtype {cp.dtype}")
    if cp.min() < 0 or cp.max() > steps or np.any(np.diff(cp) <= 0):
        raise bad(f"checkpoints must increase within [0, steps = {steps}]; got "
                  f"{cp.min()}..{cp.max()}")
    k = len(cp)
    shape("x", (runs, n, d))
    shape("gram", (runs, k, n, n))
    shape("tokens", (runs, k, n, d))
    g = data.get("gram")
    if g is not None and not np.isfinite(g).all():
        raise bad(f"array 'gram' holds {int((~np.isfinite(g)).sum())} nan or infinite entries")
    own = meta.get("observed_at", {})  # observers with checkpoints of their own
    for name, a in data.items():
        if not name.startswith(_OBSERVED):
            continue
        kk = len(own.get(name.removeprefix(_OBSERVED), cp))
        if tuple(a.shape[:2]) != (runs, kk):
            raise bad(f"array {name!r} has shape {tuple(a.shape)}, but the header says "
                      f"({runs}, {kk}, ...) (runs, the observer's checkpoints)")


def _sim_result(meta: dict[str, Any], data: dict[str, np.ndarray]) -> SimResult:
    known = {"params", "steps", "dt", "runs", "seed", "sampler", "scheme", "init", "dtype",
             "device", "wall_s", "checkpoints", "alpha", "T", "kind", "schema", "package",
             "version"}
    return SimResult(
        params=ModelParams.from_dict(meta["params"]), grid=TimeGrid(meta["steps"], meta["dt"]),
        runs=meta["runs"], seed=meta["seed"], sampler=meta["sampler"], scheme=meta["scheme"],
        init=meta["init"], checkpoints=data["checkpoints"], state=data["x"], gram=data.get("gram"),
        tokens=data.get("tokens"), dtype=meta["dtype"], device=meta["device"], wall_s=meta["wall_s"],
        extra={k: v for k, v in meta.items() if k not in known},
        observed={k.removeprefix(_OBSERVED): v for k, v in data.items() if k.startswith(_OBSERVED)},
    )


# ----------------------------------------------------------------------------- Parquet tables

_PARQUET_META_KEY = b"tokensde"


def write_parquet(table: Any, path: str | os.PathLike, meta: dict[str, Any]) -> Path:
    """Write a pyarrow Table (or pandas DataFrame) to `path` atomically, with the JSON header
    `meta` (see `header`) in the Parquet schema metadata.

    Args:
        table: A pyarrow Table or a pandas DataFrame.
        path: The Parquet file to write.
        meta: The header (`header(...)`).

    Returns:
        The path written.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(table, pa.Table | pd.DataFrame):
        raise TypeError(f"table must be a pyarrow Table or a pandas DataFrame; got "
                        f"{type(table).__name__}")
    if not isinstance(meta, dict):
        raise TypeError(f"meta must be a dict (a header from `header`); got {type(meta).__name__}")
    t = table if isinstance(table, pa.Table) else pa.Table.from_pandas(table, preserve_index=False)
    old = dict(t.schema.metadata or {})
    old.pop(b"pandas", None)
    t = t.replace_schema_metadata({**old, _PARQUET_META_KEY: json.dumps(meta).encode()})
    return atomic_write(path, lambda tmp: pq.write_table(t, tmp))


def read_parquet(path: str | os.PathLike, kind: str) -> tuple[Any, dict[str, Any]]:
    """Read a Parquet file written by `write_parquet`: `(pyarrow Table, header)`.

    Raises FileNotFoundError if absent and StoreError if truncated, foreign or from a newer schema.

    Args:
        path: The Parquet file.
        kind: The header kind the file must carry.

    Returns:
        `(table, header)`: a pyarrow Table and the JSON header.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    _check_path_type(path, "path")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results file {path} does not exist")
    try:
        t = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise StoreError(f"{path} is not a readable Parquet file (truncated or corrupt?): "
                         f"{err}") from err
    raw = (t.schema.metadata or {}).get(_PARQUET_META_KEY)
    try:
        meta = json.loads(raw) if raw is not None else None
    except ValueError as err:
        raise StoreError(f"{path} has an unreadable tokensde header: {err}") from err
    if meta is None:
        raise StoreError(f"{path} is not a tokensde file (no tokensde header in its metadata)")
    return t, _check_meta(meta, kind, str(path))
