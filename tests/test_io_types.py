"""The results store refuses, by name, what is not what it takes: a result that is not a
`SimResult`, a path that is not a path, a table that is not a table (a TypeError naming the
argument and what it must be, not an AttributeError from inside)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tokensde.io import outputs, store

NOT_PATHS = [None, 3, b"r.npz", ["r.npz"]]


def test_save_result_refuses_what_is_not_a_result(tmp_path):
    for bad in ("not a result", None, {"state": 1}):
        with pytest.raises(TypeError, match=r"^result must be a SimResult .*got "
                                            + type(bad).__name__):
            store.save_result(bad, tmp_path / "r.npz")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("bad", NOT_PATHS)
def test_every_reader_and_writer_refuses_a_path_that_is_not_one(tmp_path, bad):
    calls = {"path": [lambda: store.load_result(bad), lambda: store._read_json(bad, "k", "r"),
                      lambda: store.read_parquet(bad, "k")],
             "output path": [lambda: store.write_json(bad, {}),
                             lambda: store.atomic_write(bad, lambda tmp: None)],
             "--out": [lambda: store.check_output(bad, "--out"),
                       lambda: outputs._guard_output(bad, "--out"),
                       lambda: outputs._clear_results(bad, "--out")]}
    calls["path"] += [lambda: outputs._enclosing_sweep(bad), lambda: outputs._is_sweep_dir(bad),
                      lambda: outputs._written_by_tokensde(bad)]
    for name, funcs in calls.items():
        for call in funcs:
            with pytest.raises(TypeError, match=rf"^{name} must be a file path \(str or "
                                                rf"os.PathLike\); got {type(bad).__name__}$"):
                call()


def test_write_parquet_refuses_what_is_not_a_table(tmp_path):
    with pytest.raises(TypeError, match=r"^table must be a pyarrow Table or a pandas DataFrame"):
        store.write_parquet("rows", tmp_path / "t.parquet", store.header("k"))
    with pytest.raises(TypeError, match=r"^meta must be a dict"):
        store.write_parquet(pd.DataFrame({"x": [1]}), tmp_path / "t.parquet", "k")
    assert not list(tmp_path.iterdir())
    path = store.write_parquet(pd.DataFrame({"x": [1.5]}), tmp_path / "t.parquet",
                               store.header("k"))
    table, meta = store.read_parquet(Path(path), "k")
    assert table.column("x").to_pylist() == [1.5] and meta["kind"] == "k"


def test_atomic_write_refuses_a_writer_that_is_not_callable(tmp_path):
    with pytest.raises(TypeError, match=r"^write must be a callable .*got str"):
        store.atomic_write(tmp_path / "f.txt", "text")
    assert not list(tmp_path.iterdir())
    store.atomic_write(tmp_path / "f.txt", lambda tmp: tmp.write_text("text"))
    assert (tmp_path / "f.txt").read_text() == "text"
