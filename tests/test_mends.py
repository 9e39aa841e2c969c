"""Issue 21 item 7: `plots.__all__` lists every figure module; one `Progress` alias."""

from __future__ import annotations

import re
from pathlib import Path

import tokensde
import tokensde.plots

ROOT = Path(tokensde.__file__).resolve().parent


def test_plots_all_lists_every_module():
    modules = {p.stem for p in (ROOT / "plots").glob("*.py") if not p.stem.startswith("_")}
    assert set(tokensde.plots.__all__) == modules


def test_progress_is_defined_once():
    where = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
             if re.search(r"^Progress\s*=", p.read_text(), re.MULTILINE)]
    assert where == ["sim/loop.py"]
