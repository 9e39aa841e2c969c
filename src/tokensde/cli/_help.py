"""What every command's help ends with: an Examples section (Typer's epilog), kept in one table
so that a test can parse each example against the command it belongs to
(tests/test_cli_options.py), and flags shown without a value type."""

from __future__ import annotations

from typing import Any

import typer

__all__ = ["EXAMPLES", "attach"]

# command path -> (command line, what it does); each line starts with `tokensde PATH`
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "": (("tokensde two-token prob --beta 1 --d 3 --rho0 0", "an exact result, at once"),
         ("tokensde simulate --n 8 --d 3 --beta 1 --time 20 --dt 0.02 --runs 200 --until decided",
          "a Monte Carlo run to decision"),
         ("tokensde reproduce --quick --out results/quick", "every figure and the report")),
    "simulate": (
        ("tokensde simulate --n 2 --d 3 --beta 1 --time 20 --dt 0.02 --runs 200 --until decided",
         "two tokens, each run until it is decided (at most T = 20)"),
        ("tokensde simulate --n 8 --d 3 --beta 3 --layers 100 --runs 1000",
         "100 layers with residual scale 1/10, read at depth time 1"),
        ("tokensde simulate --n 16 --d 2 --beta 3 --time 10 --dt 0.02 --scheme sde --json",
         "the SDE limit to T = 10, JSON summary")),
    "two-token": (("tokensde two-token critical --d 10", "beta_c(10)"),),
    "two-token prob": (("tokensde two-token prob --beta 1 --d 3 --rho0 0", "P_anti from rho0 = 0"),
                       ("tokensde two-token prob --beta 1.5 --d 6 --rho0 uniform --json",
                        "from a uniform start, as JSON")),
    "two-token critical": (("tokensde two-token critical --d 10", "beta_c(10)"),),
    "two-token mc": (
        ("tokensde two-token mc --beta 2 --d 4 --rho0 -0.5 --runs 1000 --time 35 --seed 1",
         "runs until decided at --tol, at most T = 35, against the exact P_anti"),
        ("tokensde two-token mc --beta 2 --d 4 --rho0 -0.5 --runs 20000 --engine reduced",
         "the 1-D diffusion of rho instead of the network"),
        ("tokensde two-token mc --beta 1 --d 3 --runs 300 --time 8 --until horizon",
         "every run to T = 8")),
    "two-token grid": (("tokensde two-token grid --out runs/phase-grid --figure phase.png "
                        "--workers 2", "the phase diagram; the same command resumes"),),
    "two-token hybrid": (("tokensde two-token hybrid --beta 1", "the threshold eps_c only"),
                         ("tokensde two-token hybrid --beta 0.5 --eps 0.77 --runs 200 --time 60",
                          "with a Monte Carlo at eps")),
    "sweep": (("tokensde sweep run examples/sweeps/smoke.toml --out runs/smoke --workers 2",
               "a small sweep"),),
    "sweep run": (("tokensde sweep run examples/sweeps/smoke.toml --out runs/smoke --workers 2",
                   "run or resume"),),
    "sweep status": (("tokensde sweep status runs/smoke", "cells done, failed, pending"),),
    "sweep table": (("tokensde sweep table runs/smoke --format csv", "one row per cell"),),
    "sweep plot": (("tokensde sweep plot runs/multi-token-quick figures", "figures of a sweep"),),
    "sweep kinds": (("tokensde sweep kinds", "the experiment kinds and their parameters"),),
    "vit": (("tokensde vit compare --dataset digits --epochs 1 --seeds 1 --out vit-digits",
             "a one-minute comparison"),),
    "vit compare": (("tokensde vit compare --dataset digits --epochs 1 --seeds 1 --out vit-digits",
                     "every arm, one seed, one epoch on the digits"),),
    "vit geometry": (("tokensde vit geometry --dataset digits --seeds 1 --out vit-geometry",
                      "token cosines across depth at init"),),
    "vit plot": (("tokensde vit plot --out vit-digits", "redraw the figures"),),
    "vit depth": (("tokensde vit depth --size quick --out vit-depth-quick",
                   "the quick depth sweep"),),
    "vit depth-report": (("tokensde vit depth-report vit-depth-quick", "redraw its report"),),
    "vit fair": (("tokensde vit fair --size fair-tiny --out vit-fair-tiny",
                  "the fair protocol at its smallest size"),),
    "vit fair-report": (("tokensde vit fair-report vit-fair-tiny", "redraw its report"),),
    "vit export-data": (("tokensde vit export-data --out fmnist.npz --train 7000 --test 2000",
                         "a data subset for another machine"),),
    "real": (("tokensde real torch-encoder --layers 12 --width 128 --heads 4 --inits 32 "
              "--out real-enc", "PyTorch's encoder against tokensde"),),
    "real gpt2": (("tokensde real gpt2 --layers 12 --width 256 --heads 4 --inits 32 --out real-gpt2",
                   "GPT-2 at init"),),
    "real bert": (("tokensde real bert --inits 32 --out real-bert", "BERT at init"),),
    "real vit": (("tokensde real vit --inits 32 --out real-vit", "a ViT at init"),),
    "real torch-encoder": (("tokensde real torch-encoder --layers 12 --width 128 --heads 4 "
                            "--norm-last --out real-enc", "post-LN encoder"),),
    "real llama": (("tokensde real llama --layers 12 --width 64 --heads 4 --inits 32 "
                    "--out real-llama", "Llama (RMSNorm, SwiGLU, RoPE) at init"),),
    "real module": (("tokensde real module tests/data/own_block.py:make --inits 32 --out real-own",
                      "your own torch network, read from the file"),
                     ("tokensde real module net.py:make --ctx 16 --depth-scaled --out real-own",
                      "Gaussian inputs of 16 tokens; branches scaled as 1/L: the limit too")),
    "meanfield": (("tokensde meanfield table --d 2 --beta 3 --n 16 --runs 8", "a small table"),),
    "meanfield table": (
        ("tokensde meanfield table --d 2 --beta 3 --n 16 --n 64 --runs 32 --time 40 --out mf",
         "runs until decided, at most T = 40; resumable in mf"),
        ("tokensde meanfield table --d 2 --beta 1 --n 16 --start iid --runs 8 --tol 1e-8",
         "at the tolerance of the other commands")),
    "meanfield convergence": (("tokensde meanfield convergence --beta 1 --beta 3",
                               "node-count convergence of the limit"),),
    "figure": (("tokensde figure --list", "the figure names"),
               ("tokensde figure convergence --quick --out results/quick", "one figure")),
    "reproduce": (("tokensde reproduce --quick --out results/quick", "about 4 min on 2 cores"),
                  ("tokensde reproduce --full --out results/full --skip vit,vit-depth",
                   "the publication size")),
    "token-noise": (("tokensde token-noise theory --beta 5 --d 2", "the threshold"),),
    "token-noise theory": (("tokensde token-noise theory --beta 5 --d 2", "tau_c and beta_*"),),
    "token-noise order": (("tokensde token-noise order --n 256 --ratios 0.8,1.25 --runs 4 "
                           "--time 60 --burn 30", "the order parameter on both sides"),),
}


def epilog(path: str) -> str:
    """The Examples section of command `path` ('' for the root): one paragraph per example,
    what it does, then the command line."""
    lines = [f"{what[0].upper()}{what[1:]}:\n  {cmd}" for cmd, what in EXAMPLES[path]]
    return "Examples:\n\n" + "\n\n".join(lines)


def attach(app: typer.Typer, path: str = "") -> None:
    """Give `app` and every command and group below it its Examples epilog."""
    if path == "":
        app.info.epilog = epilog("")
    for info in app.registered_commands:
        name = info.name or (info.callback.__name__ if info.callback else "")
        info.epilog = epilog(f"{path} {name}".strip())
    for group in app.registered_groups:
        sub = f"{path} {group.name}".strip()
        group.epilog = epilog(sub)
        if group.typer_instance is not None:
            attach(group.typer_instance, sub)
    _flags_take_no_value()


def _flags_take_no_value() -> None:
    """Typer 0.2x prints a value type beside each flag (`--json <bool>`), though a flag takes
    none: show nothing there for flags (a no-op where Typer has no such column)."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "flags_hidden", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.flags_hidden = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
