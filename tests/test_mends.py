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
             if re.search(r"^_Progress\s*=", p.read_text(), re.MULTILINE)]
    assert where == ["sim/loop.py"]


def _defined(name: str) -> list[str]:
    """Modules that define `name` at top level (class, function or assignment)."""
    pat = re.compile(rf"^(class |def )?{name}\b\s*[(:=]", re.MULTILINE)
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if pat.search(p.read_text()))


def test_one_name_one_concept():
    # the value-matrix init preset vs the ViT's arm; the outcome masks of a pair vs of clusters;
    # each section's sizes under a name of its own
    assert _defined("ValueInit") == ["model/params.py"]
    assert _defined("Arm") == ["vit/init.py"]
    assert _defined("classify") == []
    assert _defined("classify_pair") == ["theory/two_tokens.py"]
    assert _defined("classify_clusters") == ["analysis/clusters.py"]
    assert _defined("SIZES") == []
    for name, where in (("STUDY_SIZES", "study/context.py"),
                        ("_CONVERGENCE_SIZES", "analysis/convergence.py"),
                        ("_MEANFIELD_SIZES", "study/meanfield.py"), ("_REAL_SIZES", "study/real.py"),
                        ("_DEPTH_SWEEPS", "vit/depth.py"), ("_FAIR_SWEEPS", "vit/fair.py")):
        assert _defined(name) == [where]
