"""A progress bar on stderr for long library calls (tqdm), shared by the study and the CLI."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm


@contextmanager
def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = ""
                 ) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr (hidden when disabled or stderr is not a terminal); yields `update(k)`.

    Args:
        total: Number of units of the whole task.
        desc: Label shown before the bar.
        enabled: False shows no bar.
        unit: Name of a unit on the bar.

    Yields:
        `update(k)`, which advances the bar by `k` units.
    """
    if not enabled:
        yield lambda k: None
        return
    bar = tqdm(total=total, desc=desc, file=sys.stderr, unit=unit, unit_scale=True, leave=False,
               mininterval=0.5, disable=None)
    try:
        yield bar.update
    finally:
        bar.close()
