"""Files: results on disk, the HTML report, progress bars, the cached time model.

Loaded on first use. Names not in `__all__` are internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .calibration import time_model
    from .progress import progress_bar
    from .report import Image, Section, Table, write_report
    from .store import (
        StoreError,
        atomic_write,
        check_output,
        header,
        load_result,
        read_parquet,
        save_result,
        write_json,
        write_parquet,
    )

__all__ = [
    "Image",
    "Section",
    "StoreError",
    "Table",
    "atomic_write",
    "check_output",
    "header",
    "load_result",
    "progress_bar",
    "read_parquet",
    "save_result",
    "time_model",
    "write_json",
    "write_parquet",
    "write_report",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
