"""The time estimate of `tokensde vit compare`: a few timed steps of the model, printed before
the training, and a run above TOKENSDE_MAX_HOURS refused unless --yes."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.sim.budget import MAX_HOURS_ENV
from tokensde.vit.estimate import time_steps, vit_memory
from tokensde.vit.model import ViTConfig

SMALL = ViTConfig(image_size=8, patch=4, dim=16, depth=1, heads=2)
TINY = ["vit", "compare", "--dataset", "digits", "--arms", "default", "--seeds", "1",
        "--epochs", "1", "--dim", "16", "--depth", "1", "--heads", "2", "--no-progress",
        "--train-subset", "64", "--test-subset", "32"]


def test_the_timed_step_and_memory_are_positive() -> None:
    t = time_steps(SMALL, 8, threads=1, steps=1)
    assert t.train > 0 and t.forward > 0 and t.batch == 8
    m = t.model()
    assert m.seconds(10, 0) == pytest.approx(10 * t.train)
    assert "timed here" in m.source
    assert vit_memory(SMALL, 8) > vit_memory(SMALL, 1) > 0


@pytest.mark.parametrize(("kw", "name"), [({"batch_size": 0}, "batch_size"),
                                          ({"batch_size": 8, "threads": 0}, "threads"),
                                          ({"batch_size": 8, "steps": 1.5}, "steps")])
def test_time_steps_refuses_bad_arguments(kw, name) -> None:
    with pytest.raises(ValueError, match=name):
        time_steps(SMALL, **kw)


def test_a_tiny_budget_refuses_without_yes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(MAX_HOURS_ENV, "1e-9")
    out = tmp_path / "vit"
    result = CliRunner().invoke(app, [*TINY, "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: vit compare would take about") and "--yes" in text
    assert MAX_HOURS_ENV in text and "--epochs" in text
    assert not (out / "runs").exists()  # refused before any training


@pytest.mark.slow  # trains the tiny model once (about 4 s)
def test_the_estimate_is_printed_and_yes_runs_anyway(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(MAX_HOURS_ENV, "1e-9")
    out = tmp_path / "vit"
    result = CliRunner().invoke(app, [*TINY, "--yes", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "estimate: about" in result.output and "timed here" in result.output
    assert (out / "summary.json").is_file()


def test_a_depth_sweep_over_the_budget_is_refused_before_any_cell(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(MAX_HOURS_ENV, "1e-9")
    out = tmp_path / "depth"
    result = CliRunner().invoke(app, ["vit", "depth", "--size", "tiny", "--quiet", "--out",
                                      str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: vit depth sweep would take about") and "--yes" in text
    assert "model shapes timed" in text
    assert not (out / "cells").exists()


def test_a_fair_sweep_over_the_budget_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(MAX_HOURS_ENV, "1e-9")
    out = tmp_path / "fair"
    args = ["vit", "fair", "--size", "fair-tiny", "--quiet", "--no-figures", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: vit fair sweep would take about") and "--yes" in text
    assert not (out / "cells").exists()
