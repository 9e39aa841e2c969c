"""The paper's claims page (docs/claims.md) states, for each claim, a command and the number it
prints with its 95 % interval. Each command here is the page's command, run as a user runs it
(through the CLI, in a scratch folder), and the printed number must lie in the page's interval;
the interval itself must appear on the page, so the page and the test cannot drift apart. Where
an independent truth exists (the exact two-token theory), the printed interval must contain it.

The exact-theory commands take well under a second and run with the quick tests; the Monte Carlo
and the report commands take 5 s to a few minutes and are marked slow.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from doc_blocks import REPO, app
from typer.testing import CliRunner

PAGE = (REPO / "docs" / "claims.md").read_text()
NUMBER = r"(-?[\d.]+)"


@dataclass(frozen=True)
class Claim:
    """A command of the claims page, the number it prints (`pattern`'s first group) and the
    interval `[lo, hi]` the page states for it (as the page writes it: `shown`)."""

    name: str
    command: str
    pattern: str
    lo: float
    hi: float
    shown: str
    slow: bool
    theory: float | None = None  # an exact value the printed interval must contain


def _exact_p_anti(beta: float, d: int, rho0: float) -> float:
    from tokensde import theory

    return float(theory.p_anti(beta, d, rho0))


CLAIMS = [
    Claim("phase-boundary", "tokensde two-token critical --d 10", rf"beta_c\(10\) = {NUMBER}",
          1.3843296, 1.3843298, "1.3843297", slow=False),
    Claim("below-the-boundary", "tokensde two-token prob --beta 1 --d 10 --rho0 0",
          rf"rho0=0\.0\) = {NUMBER}", 0.0, 0.0, "P_anti(beta=1, d=10, rho0=0.0) = 0", slow=False),
    Claim("above-the-boundary", "tokensde two-token prob --beta 2 --d 10 --rho0 0",
          rf"rho0=0\.0\) = {NUMBER}", 0.059373056, 0.059373058, "0.059373057", slow=False),
    Claim("network-agrees", "tokensde two-token mc --beta 2 --d 4 --rho0 -0.5 --runs 1000 --seed 1",
          rf"antipodal\s+{NUMBER} \[", 0.42, 0.48, "[0.42, 0.48]", slow=True, theory=0.466242),
    Claim("depth-limit", "tokensde figure convergence --quick --out results/quick",
          rf"two_tokens, strong rms token error at t = 0\.5: order {NUMBER} \[", 0.45, 0.53,
          "[0.45, 0.53]", slow=True, theory=0.5),
    Claim("noise-prevents-collapse", "tokensde simulate --n 8 --d 3 --beta 4 --until decided "
          "--time 100 --dt 0.02 --runs 100 --seed 0 --tol 1e-8", rf"p_one_cluster\s+{NUMBER} \[",
          0.03, 0.14, "[0.03, 0.14]", slow=True),
    Claim("formations-persist", "tokensde simulate --n 32 --d 3 --beta 4 --until decided "
          "--time 100 --dt 0.02 --runs 100 --seed 0 --tol 1e-8", rf"p_bipolar\s+{NUMBER} \[",
          0.89, 0.98, "[0.89, 0.98]", slow=True),
    Claim("noise-and-accuracy", "tokensde vit fair-report benchmarks/results/vit-fair "
          "benchmarks/results/vit-fair-wide", rf"\| noise:0 \| [^|]+\| [\d.]+ %, {NUMBER} \[",
          -3.0, -1.1, "-2.0 [-3.0, -1.1]", slow=True),
]


def test_every_claim_command_is_on_the_page():
    for claim in CLAIMS:
        assert any(f"{before}{claim.command}\n" in PAGE for before in ("\n", "$ ")), claim.command
        assert claim.shown in PAGE, (claim.name, claim.shown)
    assert len([c for c in CLAIMS if not c.slow]) >= 2


def test_the_exact_values_on_the_page_are_the_theory():
    """The page's exact numbers against closed forms computed here, not by the CLI."""
    assert abs(math.acosh(8) / 2 - 1.3843297) < 1e-7
    assert _exact_p_anti(1.0, 10, 0.0) == 0.0
    assert abs(_exact_p_anti(2.0, 10, 0.0) - 0.059373057) < 1e-9
    assert abs(_exact_p_anti(2.0, 4, -0.5) - 0.466242) < 1e-6


def _run(command: str, where: Path) -> str:
    if "fair-report" in command:  # it writes into its folders: give it copies
        for name in ("vit-fair", "vit-fair-wide"):
            shutil.copytree(REPO / "benchmarks" / "results" / name,
                            where / "benchmarks" / "results" / name)
    res = CliRunner().invoke(app(), shlex.split(command)[1:])
    assert res.exit_code == 0, res.output[-3000:]
    return res.output


@pytest.mark.parametrize("claim", [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow
                                                else []) for c in CLAIMS])
def test_claim_command_prints_a_number_in_the_stated_interval(claim, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = _run(claim.command, tmp_path)
    found = re.search(claim.pattern, out)
    assert found, f"{claim.command} printed no number matching {claim.pattern!r}:\n{out[-2000:]}"
    value = float(found.group(1))
    assert claim.lo <= value <= claim.hi, f"{claim.name}: {value} not in [{claim.lo}, {claim.hi}]"
    if claim.theory is not None:
        lo, hi = map(float, re.search(rf"\[{NUMBER}, {NUMBER}\]", out[found.start():]).groups())
        assert lo <= claim.theory <= hi, f"{claim.name}: theory {claim.theory} not in [{lo}, {hi}]"
