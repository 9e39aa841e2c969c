"""`tokensde sweep kinds` lists exactly the kinds that `tokensde sweep run` accepts: both read the
one registry of `tokensde.sweep.kinds` (`kind_names`, `get_kind`)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.sweep.kinds import _OWN_KINDS, _describe, get_kind, kind_names

SWEEP = 'name = "k"\nkind = "{kind}"\nseed = 0\n[grid]\nx = [1.0]\n'


def _refused_kinds(tmp_path, kind: str) -> list[str]:
    """The kinds that `sweep run`'s refusal of `kind` names as accepted."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.format(kind=kind))
    r = CliRunner().invoke(app, ["sweep", "run", str(cfg), "--out", str(tmp_path / "o"),
                                 "--quiet"])
    assert r.exit_code == 2, r.output
    found = re.search(r"registered experiment kind \(([^)]*)\); got '" + kind, r.output)
    assert found, r.output
    return found.group(1).split(", ")


def test_the_registry_names_every_built_in_kind_once():
    from tokensde.model.checks import ParameterError

    names = kind_names()
    assert names == sorted(set(names)) and set(_OWN_KINDS) <= set(names)
    with pytest.raises(ParameterError, match=re.escape(f"({', '.join(names)}); got 'nope'")):
        get_kind("nope")


@pytest.mark.slow  # the sweep engine loads (pandas, pyarrow): about 1.5 s of CPU
def test_run_refuses_an_unknown_kind_naming_every_kind_it_accepts(tmp_path):
    assert _refused_kinds(tmp_path, "no_such_kind") == kind_names()
    assert set(_OWN_KINDS) <= set(kind_names())
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_run_accepts_a_listed_kind(tmp_path):
    """A listed kind passes the name check: the one-cell null sweep runs."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.format(kind="null"))
    r = CliRunner().invoke(app, ["sweep", "run", str(cfg), "--out", str(tmp_path / "o"),
                                 "--quiet"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert (summary["total"], summary["ran"], summary["failed"]) == (1, 1, 0)


@pytest.mark.slow  # every kind's module loads (torch for the ViT kinds): about 3 s of CPU
# (run alone; after the tests above, most are loaded already)
def test_kinds_lists_every_kind_that_run_accepts():
    r = CliRunner().invoke(app, ["sweep", "kinds"])
    assert r.exit_code == 0, r.output
    listed = json.loads(r.stdout)
    assert [k["kind"] for k in listed] == kind_names()
    for entry in listed:
        kind = get_kind(entry["kind"])  # what `sweep run` resolves
        assert kind.name == entry["kind"]
        assert sorted(entry["params"]) == sorted(kind.params)
        assert entry == _describe(kind.name)


def test_the_sweep_layer_names_no_module_above_it():
    """tokensde's own kinds in other layers register through the entry-point group, as a plugin's
    do: no string in sweep/ names a module of the layers above it."""
    from pathlib import Path

    import tokensde.sweep as sweep

    above = re.compile(r"tokensde\.(vit|meanfield|study|real|cli|plots|io)\b")
    for path in Path(sweep.__file__).parent.glob("*.py"):
        code = re.sub(r"LEGACY_MODULES = frozenset\(\{[^}]*\}\)", "", path.read_text())
        assert not above.search(code), path.name  # (the old names it reads and ignores aside)
    from tokensde.sweep.kinds import _plugin_kinds

    assert set(_OWN_KINDS) - {"multi_token", "null"} <= set(_plugin_kinds())
