"""Every option of every command is declared in `tokensde.cli._applies.COMMANDS` (always, or in
some modes), and every option typed outside each of its modes is refused with exit 2 and one line
that names the option and the mode, before any work: the cases are enumerated from the
declaration (command x option x condition x mode value outside it), run in process."""

from __future__ import annotations

from typing import Any

import pytest
import typer.testing
from cli_contract import ABSENT, CASES, GIVEN, LEAVES, ROOT, all_options, command_line, inside, settle

from tokensde.cli import app
from tokensde.cli._applies import COMMANDS, MODES, flags_of, refusal


@pytest.fixture(scope="module")
def runner() -> Any:
    """A CliRunner on the click command built once (Typer rebuilds it on each call otherwise)."""
    patch = pytest.MonkeyPatch()
    if hasattr(typer.testing, "_get_command"):
        patch.setattr(typer.testing, "_get_command", lambda _app: ROOT)
    yield typer.testing.CliRunner()
    patch.undo()


def test_every_command_declares_exactly_its_options():
    assert set(COMMANDS) == set(LEAVES), (
        f"undeclared commands {sorted(set(LEAVES) - set(COMMANDS))}, declared but absent "
        f"{sorted(set(COMMANDS) - set(LEAVES))}: add them to tokensde.cli._applies.COMMANDS")
    for path, decl in COMMANDS.items():
        opts = set(all_options(LEAVES[path]))
        assert decl.options == opts, (
            f"tokensde {path}: options not declared {sorted(opts - decl.options)}, declared "
            f"but absent {sorted(decl.options - opts)} (tokensde.cli._applies.COMMANDS)")
        assert not decl.always & set(decl.only), path
        for option, conditions in decl.only.items():
            assert conditions, (path, option)
            for w in conditions:
                if w.given:
                    assert set(w.given) <= opts, (path, option, w)
                    continue
                assert w.param in opts or w.param in decl.fixed, (path, option, w)
                assert set(w.values) < set(MODES[w.param]), (path, option, w)  # some mode refuses


def test_the_cases_cover_every_declared_condition():
    covered = {(path, option, w) for path, option, w, _ in CASES}
    for path, decl in COMMANDS.items():
        for option, conditions in decl.only.items():
            for w in conditions:
                if w.param in decl.fixed and decl.fixed[w.param] in w.values:
                    continue  # this command is one where it applies: another one refuses it
                assert (path, option, w) in covered, (path, option, w)
    for option in ("norm_first", "value_law", "vocab"):  # `real ARCH`: each refused somewhere
        assert any(o == option and p.startswith("real ") for p, o, _, _ in CASES)


def _setting_id(settings: dict[str, Any]) -> str:
    """A stable test id for a mode setting (the sentinels GIVEN and ABSENT by name)."""
    names = {id(GIVEN): "given", id(ABSENT): "absent"}
    return ",".join(f"{k}={names.get(id(v), v)}" for k, v in settings.items()) or "none"


@pytest.mark.parametrize(("path", "option", "cond", "settings"), CASES,
                         ids=[f"{p}-{o}-{_setting_id(s)}" for p, o, _, s in CASES])
def test_an_option_outside_its_mode_is_refused(runner, path, option, cond, settings):
    args = command_line(path, option, settings)
    result = runner.invoke(app, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, (args, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.output)
    flags = flags_of(LEAVES[path])
    assert flags[option] in lines[0], (args, lines[0])
    decl = COMMANDS[path]
    mode = (flags[cond.given[0]] if cond.given else decl.fixed[cond.param]
            if cond.param in decl.fixed else flags[cond.param])
    assert mode in lines[0], (args, lines[0])


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_an_option_inside_its_modes_passes(path):
    """With every condition held, no option is refused: the rules refuse only outside."""
    decl = COMMANDS[path]
    for option, conditions in decl.only.items():
        settings: dict[str, Any] = {}
        for w in conditions:
            if w.param in decl.fixed:
                continue
            settings[w.given[0] if w.given else w.param] = inside(w, decl)
        for key in list(settings):
            settle(decl, settings, key)
        values = {k: "x" if v is GIVEN else v for k, v in settings.items() if v is not ABSENT}
        if any(w.param in decl.fixed and decl.fixed[w.param] not in w.values
               for w in conditions):
            assert refusal(path, values, {option, *values}) is not None, (path, option)
        else:
            assert refusal(path, values, {option, *values}) is None, (path, option, settings)


def test_a_default_is_never_refused():
    """An option left at its default, outside its modes, is not refused; typed, it is."""
    values = {"scheme": "network", "qk_redraw": "run", "qk_samples": 8}
    assert refusal("simulate", values, set()) is None
    assert refusal("simulate", values, {"scheme"}) is None
    assert "--qk-samples" in (refusal("simulate", values, {"qk_samples"}) or "")
    mc = {"engine": "reduced", "sampler": "auto", "mlp": "none"}
    assert refusal("two-token mc", mc, {"engine"}) is None
    assert refusal("two-token mc", mc, {"engine", "sampler"}) == (
        "--sampler applies only with --engine network (got --engine reduced)")


def test_known_cases(runner, tmp_path):
    """The options of the report: each refused with the line that names it and its mode."""
    out = tmp_path / "r.json"
    for args, line in (
            (["simulate", "--n", "2", "--layers", "2", "--qk-samples", "4", "--scheme", "network"],
             "--qk-samples applies only with --scheme sde (got --scheme network)"),
            (["two-token", "mc", "--beta", "1", "--d", "3", "--engine", "reduced", "--sampler",
              "fast"], "--sampler applies only with --engine network (got --engine reduced)"),
            (["vit", "compare", "--block", "attention-only", "--mlp-ratio", "4"],
             "--mlp-ratio applies only with --block standard (got --block attention-only)"),
            (["two-token", "hybrid", "--beta", "1", "--out", str(out)],
             "--out applies only with --eps (got no --eps)"),
            (["real", "gpt2", "--norm-last", "--out", str(tmp_path / "g")],
             "--norm-first/--norm-last does not apply to gpt2 (only to torch-encoder)"),
            (["meanfield", "table", "--mixture", "1:2:0"],
             "--mixture applies only with --start mixture (got --start iid, quasi)")):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and result.output == f"error: {line}" + (
            "; drop it\n" if "does not apply" in line else "\n"), result.output
    assert not out.exists() and not (tmp_path / "g").exists()


@pytest.mark.slow  # torch and the models load (about 4 s)
def test_real_spec_refuses_the_switches_that_its_architecture_does_not_read():
    """The library's RealSpec refuses, for each architecture, the switches that the CLI
    declares for other architectures only (a value other than the default)."""
    pytest.importorskip("torch")
    from tokensde.cli._applies import ARCHS
    from tokensde.model.checks import ParameterError
    from tokensde.real.models import RealSpec

    decl = COMMANDS["real gpt2"].only
    switches = {"norm_first": False, "residual_scaling": False, "bias": False,
                "value_law": "gaussian"}
    for name, off in switches.items():
        (w,) = decl[name]
        for arch in ARCHS:
            if arch in w.values:
                RealSpec(arch=arch, **{name: off})
            else:
                with pytest.raises(ParameterError, match=name):
                    RealSpec(arch=arch, **{name: off})


@pytest.mark.slow  # the simulator, the ViT and the mean-field modules load (torch)
def test_the_modes_are_the_library_choices():
    """Every value a mode parameter takes in the library is enumerated in MODES (so the cases
    above cover every mode)."""
    from tokensde.analysis.pair_monte_carlo import _ENGINES
    from tokensde.meanfield.absorption import STARTS
    from tokensde.model.mlp import MLPS
    from tokensde.model.noise import NOISE_LAWS
    from tokensde.model.qk import QK_LAWS, QK_REDRAWS
    from tokensde.real.models import ARCHS
    from tokensde.sim.simulate import _SCHEMES
    from tokensde.sweep.backends import _BACKENDS
    from tokensde.vit.model import _BLOCKS

    library = {"scheme": tuple(_SCHEMES), "qk": QK_LAWS.names(), "qk_redraw": QK_REDRAWS,
               "noise": NOISE_LAWS.names(), "mlp": MLPS.names(), "engine": _ENGINES,
               "block": _BLOCKS, "backend": _BACKENDS, "start": STARTS, "arch": ARCHS,
               "init": ("uniform", "pair"), "list_": (False, True),
               "depth_scaled": (False, True)}
    assert set(library) == set(MODES)
    for name, values in library.items():
        assert set(MODES[name]) == set(values), name


def test_the_help_of_each_option_gives_its_modes():
    from tokensde.cli._applies import modes_text

    for path, decl in COMMANDS.items():
        cmd, flags = LEAVES[path], flags_of(LEAVES[path])
        for p in cmd.params:
            text = modes_text(path, p.name, flags)
            assert bool(text) == (p.name in decl.only), (path, p.name)
            if text:
                assert p.help.endswith(f"({text[0].upper()}{text[1:]}.)"), (path, p.help)
    assert modes_text("simulate", "qk_samples", flags_of(LEAVES["simulate"])) == (
        "only with --scheme sde and --qk-redraw layer")
