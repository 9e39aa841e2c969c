"""The documentation site: it builds, and its API reference covers every public name.

Every name in the `__all__` of the package root and of each layer folder must have its anchor
on the layer's reference page (`docs/api/<layer>.md`), as mkdocstrings renders it. The build
here is not strict (CI runs `mkdocs build --strict` on its own); it needs the `docs` extra.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("model", "theory", "sim", "io", "analysis", "sweep", "plots", "vit", "real", "meanfield",
          "study", "cli")
STUBS = ("meanfield", "real", "reporting", "first_passage", "ray", "vit-fair")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def _anchors(page: Path) -> set[str]:
    return set(re.findall(r'id="(tokensde[\w.]*)"', page.read_text()))


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.slow
def test_every_public_name_of_a_layer_is_in_its_reference_page(site, layer):
    pkg = importlib.import_module(f"tokensde.{layer}")
    ids = _anchors(site / "api" / layer / "index.html")
    prefix = f"tokensde.{layer}"
    # a function that shares its module's name is rendered from that module
    missing = [n for n in pkg.__all__ if f"{prefix}.{n}" not in ids and f"{prefix}.{n}.{n}" not in ids]
    assert not missing, f"{prefix}: not in docs/api/{layer}.md: {missing}"


@pytest.mark.slow  # the site build, about 11 s of CPU; the slow set builds it for the layer pages anyway
def test_every_root_name_is_in_the_reference(site):
    import tokensde

    ids = _anchors(site / "api" / "index.html")
    text = (REPO / "docs" / "api" / "index.md").read_text()
    missing = [n for n in tokensde.__all__ if f"tokensde.{n}" not in ids
               and not (n == "theory" and (site / "api" / "theory" / "index.html").exists())
               and not (n == "__version__" and "tokensde.__version__" in text)]
    assert not missing, missing


def test_every_page_is_in_the_nav_and_the_placeholders_exist():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = sorted(p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md"))
    assert [p for p in pages if f": {p}" not in nav] == []
    for stub in STUBS:
        assert (REPO / "docs" / f"{stub}.md").exists(), stub


def test_the_api_pages_document_each_layer_package():
    for layer in LAYERS:
        assert f"::: tokensde.{layer}\n" in (REPO / "docs" / "api" / f"{layer}.md").read_text()
