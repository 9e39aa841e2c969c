"""Which options apply in which modes: declared once for every command, enforced for all of them.

Each command lists its options (by parameter name) in `COMMANDS`: those that apply always, and
those that apply only in some modes, each with the conditions (`When`) that must all hold. A mode
is the value of another option (`--scheme sde`, `--engine network`, `--block standard`), the
presence of another option (`--eps`, `--out`), or the command itself (`real gpt2`). `enforce(app)`
gives every command a class that shows the modes in its help and refuses an option typed outside
them before the command's code runs, with one line that names both, and exit status 2:

    error: --qk-samples applies only with --scheme sde (got --scheme network)

Only options typed on the command line count: a default never triggers the refusal.
tests/test_applicability.py enumerates every command, option and mode from this table, and fails
on an option that is not declared; docs/contract.md shows it (tests/cli_contract.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import typer
from typer.core import TyperCommand

__all__ = ["COMMANDS", "MODES", "Command", "When", "enforce", "flags_of", "modes_text", "refusal"]


@dataclass(frozen=True)
class When:
    """One condition of an option: parameter `param` takes one of `values` (`exclude`: none of
    them; a list-valued parameter: one of its values does), or one of the parameters `given` is
    typed (`exclude`: none of them is)."""

    param: str = ""
    values: tuple[Any, ...] = ()
    exclude: bool = False
    given: tuple[str, ...] = ()


def only(param: str, *values: Any) -> When:
    """The option applies when `param` is one of `values`."""
    return When(param, values)


def unless(param: str, *values: Any) -> When:
    """The option applies when `param` is none of `values`."""
    return When(param, values, exclude=True)


def given(*params: str) -> When:
    """The option applies when one of `params` is typed."""
    return When(given=params)


def absent(param: str) -> When:
    """The option applies when `param` is not typed (it would override the option)."""
    return When(given=(param,), exclude=True)


@dataclass(frozen=True)
class Command:
    """The options of one command: `always` apply in every mode, `only` maps an option to the
    conditions under which it applies; `fixed`: modes set by the command itself (arch of
    `real ARCH`)."""

    always: frozenset[str]
    only: Mapping[str, tuple[When, ...]]
    fixed: Mapping[str, str] = field(default_factory=dict)

    @property
    def options(self) -> frozenset[str]:
        """Every option declared."""
        return self.always | frozenset(self.only)


def command(always: str, **rules: When | tuple[When, ...]) -> Command:
    """A `Command` from the names that apply always (space-separated) and the mode-specific ones."""
    return Command(frozenset(always.split()),
                   {k: v if isinstance(v, tuple) else (v,) for k, v in rules.items()})


# The values of each parameter that sets a mode (the test enumerates them all).
ARCHS = ("gpt2", "bert", "vit", "torch-encoder", "llama")
MODES: dict[str, tuple[Any, ...]] = {
    "scheme": ("network", "sde"), "qk": ("identity", "gaussian", "wigner", "goe"),
    "qk_redraw": ("run", "layer"), "noise": ("matrix", "scalar", "symmetric"),
    "mlp": ("none", "relu", "gelu", "swiglu"), "init": ("uniform", "pair"),
    "engine": ("network", "reduced"), "block": ("standard", "attention-only"),
    "backend": ("local", "ray"), "start": ("iid", "quasi", "mixture"), "list_": (False, True),
    "arch": ARCHS, "depth_scaled": (False, True),
}

_SIMULATE = command(
    "n d beta attention causal noise law sigma value_init heads qk norm mlp token_noise mean "
    "layers time init runs seed sampler attention_eval scheme dtype device checkpoints tol "
    "until step_error extrapolate json_out out plot yes",
    eps=only("noise", "scalar"),
    qk_scale=unless("qk", "identity"), qk_redraw=unless("qk", "identity"),
    qk_samples=(only("scheme", "sde"), only("qk_redraw", "layer")),
    mlp_sigma=unless("mlp", "none"), mlp_width=unless("mlp", "none"),
    alpha=given("layers"), dt=given("time"), rho0=only("init", "pair"),
    force=given("out", "plot"))

# `two-token hybrid` without --eps gives the threshold only: its Monte Carlo options need --eps
_HYBRID_MC = ("d", "rho0", "runs", "time", "dt", "seed", "tol", "engine", "out", "quiet", "yes")

_VIT_MODEL = dict(mlp_ratio=only("block", "standard"))

# `real ARCH`: the options that only some architectures read
_REAL_ONLY: dict[str, tuple[str, ...]] = {
    "vocab": ("gpt2", "bert", "torch-encoder", "llama"),  # ViT reads images
    "ctx": ("gpt2", "bert", "torch-encoder", "llama"),  # ViT: the patches set the tokens
    "centring": ("gpt2", "bert", "vit", "torch-encoder"),  # Llama's norms are RMSNorms
    "norm_first": ("torch-encoder",),
    "residual_scaling": ("gpt2",),
    "bias": ("torch-encoder",),
    "value_law": ("gpt2",),
}


def _real(arch: str) -> Command:
    rules = command("layers width heads inits inputs out seed qk mlp value_scale "
                    "sde_steps sde_runs threads force as_json yes",
                    **{k: only("arch", *v) for k, v in _REAL_ONLY.items()})
    return replace(rules, fixed={"arch": arch})


COMMANDS: dict[str, Command] = {
    "simulate": _SIMULATE,
    "figure": command("json_out list_", quick=(only("list_", False), absent("size")),
                      **{k: only("list_", False) for k in ("out", "size", "seed", "workers",
                                                           "yes", "force")}),
    "reproduce": command("out size seed workers only skip force json_out yes",
                         quick=absent("size"), full=absent("size")),
    "two-token prob": command("beta d rho0 json_out"),
    "two-token critical": command("d json_out"),
    "two-token mc": command(
        "beta d rho0 runs time until dt seed sigma tol engine out quiet json_out yes",
        sampler=only("engine", "network"), mlp=only("engine", "network"),
        mlp_sigma=(only("engine", "network"), unless("mlp", "none")), force=given("out")),
    "two-token grid": command("out_dir out betas ds rho0 runs time seed engine workers quiet"),
    "two-token hybrid": command("beta eps json_out", force=(given("eps"), given("out")),
                                **{k: given("eps") for k in _HYBRID_MC}),
    "sweep run": command("out workers backend quiet yes", address=only("backend", "ray")),
    "sweep status": command(""),
    "sweep table": command("fmt output", force=given("output")),
    "sweep plot": command("prefix"),
    "sweep kinds": command(""),
    "vit compare": command(
        "arms seeds seed0 epochs dataset data_dir train_subset test_subset dim depth heads patch "
        "norm block residual_scale batch_size lr weight_decay warmup label_smoothing augment "
        "threads jobs out json_out progress yes", **_VIT_MODEL),
    "vit geometry": command("arms dataset data_dir images seeds dim depth heads patch norm block "
                            "residual_scale bins tol out json_out force", **_VIT_MODEL),
    "vit plot": command("out"),
    "vit depth": command("size out workers backend dataset data_dir epochs train_subset "
                         "test_subset quiet yes", address=only("backend", "ray")),
    "vit depth-report": command("also"),
    "vit fair": command("out size device workers data_dir train_subset val_subset test_subset "
                        "with_ figures quiet yes"),
    "vit fair-report": command("figures"),
    "vit export-data": command("out dataset data_dir train test force"),
    **{f"real {a}": _real(a) for a in ARCHS},
    "real module": command("ctx inits inputs out seed blocks depth_scaled read_seeds threads force "
                           "as_json yes",
                           **dict.fromkeys(("sde_steps", "sde_runs"), only("depth_scaled", True))),
    "meanfield table": command("d beta n start K runs T until dt tol device out seed json_out yes",
                               mixture=only("start", "mixture"), force=given("out")),
    "meanfield convergence": command("beta K time K_ref dt seed json_out"),
    "token-noise theory": command("beta d attention mean_scale branch dt step_tol json_out"),
    "token-noise order": command("beta d attention n taus ratios runs time burn dt samples "
                                 "scheme step_tol extrapolate start seed out json_out yes",
                                 force=given("out")),
}


def _spell(flags: Mapping[str, str], name: str) -> str:
    return flags.get(name) or "--" + name.rstrip("_").replace("_", "-")


def _holds(w: When, values: Mapping[str, Any], typed: frozenset[str]) -> bool:
    if w.given:
        return any(g in typed for g in w.given) != w.exclude
    v = values.get(w.param)
    inside = any(x in w.values for x in v) if isinstance(v, list | tuple) else v in w.values
    return inside != w.exclude


def _words(w: When, flags: Mapping[str, str], fixed: Mapping[str, str]) -> tuple[str, str]:
    """Condition `w` in words: (preposition, mode), e.g. ('with', '--scheme sde')."""
    if w.given:
        return (("without", _spell(flags, w.given[0])) if w.exclude else
                ("with", " or ".join(_spell(flags, g) for g in w.given)))
    if w.param in fixed:
        return "for", ", ".join(map(str, w.values))
    if w.values in ((False,), (True,)):  # a flag: with or without it
        return "with" if w.values[0] else "without", _spell(flags, w.param)
    other = "other than " if w.exclude else ""
    return "with", f"{_spell(flags, w.param)} {other}" + " | ".join(map(str, w.values))


def _why(option: str, w: When, values: Mapping[str, Any], flags: Mapping[str, str],
         fixed: Mapping[str, str]) -> str:
    """The line of a refusal: `option` typed while condition `w` fails."""
    flag, (prep, mode) = _spell(flags, option), _words(w, flags, fixed)
    if w.param in fixed:
        return f"{flag} does not apply to {fixed[w.param]} (only to {mode}); drop it"
    if w.given:
        got = (f"{mode}, which overrides it" if w.exclude else f"no {mode}" if len(w.given) == 1
               else "neither" if len(w.given) == 2 else "none")
    else:
        v, name = values.get(w.param), _spell(flags, w.param)
        got = (f"{'with' if v else 'without'} {name}" if isinstance(v, bool) else
               f"{name} " + (", ".join(map(str, v)) if isinstance(v, list | tuple) else str(v)))
    return f"{flag} applies only {prep} {mode} (got {got})"


def refusal(path: str, values: Mapping[str, Any], typed: frozenset[str] | set[str],
            flags: Mapping[str, str] | None = None) -> str | None:
    """The one-line refusal, naming the option and the mode, of command `path` (as typed after
    `tokensde`) run with parameter values `values` (typed or default) where the parameters
    `typed` were given on the command line; None when every typed option applies. `flags`:
    parameter name -> its option as shown, where it is not `--name` (e.g. 'json_out': '--json')."""
    cmd = COMMANDS.get(path)
    if cmd is None:
        return None
    every = {**values, **cmd.fixed}
    for option, conditions in cmd.only.items():
        if option not in typed:
            continue
        for w in conditions:
            if not _holds(w, every, frozenset(typed)):
                return _why(option, w, every, flags or {}, cmd.fixed)
    return None


def _typed(ctx: Any) -> frozenset[str]:
    """The parameters of `ctx` given on the command line (or by environment variable), as
    click's `ParameterSource` tells; a default is not typed."""
    return frozenset(k for k in ctx.params if getattr(ctx.get_parameter_source(k), "name", "")
                     in ("COMMANDLINE", "ENVIRONMENT"))


def flags_of(cmd: Any) -> dict[str, str]:
    """Parameter name -> its option as shown (a flag pair as '--bias/--no-bias')."""
    return {p.name: "/".join([p.opts[0], *p.secondary_opts]) for p in cmd.params
            if getattr(p, "opts", None) and p.opts[0].startswith("-")}


def modes_text(path: str, option: str, flags: Mapping[str, str]) -> str:
    """The modes of `option` of command `path` in words ('' when it applies always): e.g.
    'only with --scheme sde and --qk-redraw layer', 'only for torch-encoder'."""
    cmd = COMMANDS.get(path)
    if cmd is None or option not in cmd.only:
        return ""
    words = [_words(w, flags, cmd.fixed) for w in cmd.only[option]]
    return "only " + " and ".join(mode if i and words[i - 1][0] == prep else f"{prep} {mode}"
                                  for i, (prep, mode) in enumerate(words))


def _checked(path: str, base: type[TyperCommand]) -> type[TyperCommand]:
    """A command class for `path` whose help gives each option's modes and which refuses an
    option typed outside them before its callback runs."""

    class Checked(base):  # type: ignore[valid-type,misc]
        applies_to = path

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            flags = flags_of(self)
            for p in self.params:
                modes = modes_text(path, p.name, flags)
                if modes and getattr(p, "help", None) is not None:
                    p.help = f"{p.help} ({modes[0].upper()}{modes[1:]}.)"

        def invoke(self, ctx: Any) -> Any:
            why = refusal(path, ctx.params, _typed(ctx), flags_of(self))
            if why is not None:
                from ._common import fail

                fail(why)
            return super().invoke(ctx)

    return Checked


def enforce(app: typer.Typer, path: str = "") -> None:
    """Give every command of `app` (and of its groups) the class that checks `COMMANDS` before
    it runs and shows the modes in its help."""
    for info in app.registered_commands:
        if info.callback is None or hasattr(info.cls, "applies_to"):
            continue
        name = info.name or info.callback.__name__
        info.cls = _checked(f"{path} {name}".strip(), info.cls or TyperCommand)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            enforce(group.typer_instance, f"{path} {group.name}".strip())
