"""The command line starts without torch, pandas or matplotlib: `import tokensde.cli`, `--help`
of the root and of a command, the theory commands and an option refused before any work import
none of them (each stage checked in one fresh interpreter's `sys.modules`). torch loads when a
command starts its work (before this test, `import tokensde.cli` alone imported torch). A
deterministic check, not a timed one; the times are in benchmarks/bench_startup.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "pandas", "matplotlib")

# each stage runs in the same interpreter, in order; the modules of HEAVY loaded after it
SCRIPT = """
import contextlib, io, json, sys
heavy = {heavy!r}
seen = {{}}
def stage(name, argv):
    if argv is not None:
        from tokensde.cli import main
        sys.argv = ["tokensde", *argv]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                main()
            except SystemExit as exit:
                code = exit.code
            else:
                code = 0
        seen[name] = {{"code": code, "out": out.getvalue()}}
    else:
        import tokensde.cli  # noqa: F401
        seen[name] = {{"code": 0, "out": ""}}
    seen[name]["heavy"] = [m for m in heavy if m in sys.modules]
stage("import", None)
stage("--help", ["--help"])
stage("simulate --help", ["simulate", "--help"])
stage("two-token prob", ["two-token", "prob", "--beta", "1", "--d", "3", "--rho0", "0"])
stage("two-token critical", ["two-token", "critical", "--d", "10"])
stage("simulate without a depth", ["simulate"])
stage("simulate --tol 0", ["simulate", "--layers", "10", "--tol", "0"])
print(json.dumps(seen))
"""


def _stages() -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY)], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_theory_and_option_checks_import_no_torch_pandas_matplotlib():
    seen = _stages()
    light = ["import", "--help", "simulate --help", "two-token prob", "two-token critical",
             "simulate without a depth", "simulate --tol 0"]
    for name in light:
        assert seen[name]["heavy"] == [], f"`tokensde {name}` imported {seen[name]['heavy']}"
    # the stages did what they say: the help printed, the theory answered, the bad input refused
    assert seen["--help"]["code"] == 0 and "two-token" in seen["--help"]["out"]
    assert seen["two-token prob"]["code"] == 0
    assert "P_anti(beta=1, d=3, rho0=0.0) = 0.22242256" in seen["two-token prob"]["out"]
    assert "beta_c(10) = 1.3843297" in seen["two-token critical"]["out"]
    assert seen["simulate without a depth"]["code"] == 2
    assert seen["simulate --tol 0"]["code"] == 2
