"""A fast subset of the bad-input probe (tests/probe_bad_inputs.py): every case is refused
cleanly (one `error:` line, no traceback), nothing is lost, nothing hangs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from probe_bad_inputs import CLASSES, cases, run


def test_probe_covers_a_few_hundred_inputs():
    labels = [label for label, _ in cases()]
    assert len(labels) >= 250 and len(set(labels)) == len(labels)


@pytest.mark.slow
def test_fast_subset_of_the_probe_is_all_clean(capsys):
    counts = run(every=6)
    assert sum(counts.values()) >= 45
    assert {c: counts[c] for c in CLASSES if c != "clean"} == {c: 0 for c in CLASSES[1:]}, \
        capsys.readouterr().out
