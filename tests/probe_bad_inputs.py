"""Probe: a few hundred bad inputs and damaged files through the command line, in process
(typer's CliRunner), each put in one class:

    clean           refused: exit code != 0, an `error:` line, no traceback
    traceback       an exception escaped (or a traceback was printed)
    silently wrong  exit 0 although the input is bad
    hang            still running after the time limit (SIGALRM)
    lost            a file that was there before (a result, a sweep table) changed or vanished,
                    or a refused command left a file behind

    python tests/probe_bad_inputs.py            # every case, prints the count per class
    python tests/probe_bad_inputs.py --every 7  # one case in 7 (tests/test_probe.py runs this)

Every case must be `clean`; the exit code is 1 when one is not.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

CLASSES = ("clean", "traceback", "silently wrong", "hang", "lost")
LIMIT_S = 30

SIM = ["simulate", "--json", "--n", "3", "--d", "3", "--runs", "8", "--time", "1", "--dt", "0.1"]
MC = ["two-token", "mc", "--beta", "1", "--d", "3", "--runs", "8", "--time", "1", "--dt",
      "0.05", "--no-progress", "--json"]
HYB = ["two-token", "hybrid", "--beta", "1", "--eps", "0.5", "--runs", "8", "--time", "1",
       "--no-progress", "--json"]
GRID = ["two-token", "grid", "--out", "{res}/grid", "--figure", "{res}/g.png", "--betas", "1",
        "--ds", "3", "--runs", "4", "--time", "0.5", "--engine", "reduced", "--no-progress"]
SMALL = ("kind = 'multi_token'\nruns = 4\nT = 0.2\nseed = 3\n[params]\ndt = 0.05\n"
         "[grid]\nn = [3]\nbeta = [1.0, 2.0]\nd = [3]\n")

# option -> bad values, for simulate
SIM_BAD: dict[str, list[str]] = {
    "--n": ["0", "-1", "1.5", "x"], "--d": ["1", "0", "-3", "x"],
    "--beta": ["-1", "nan", "inf", "x"], "--runs": ["0", "-5", "x"], "--seed": ["-1", "x"],
    "--tol": ["0", "2", "nan", "-1", "1e-20"], "--checkpoints": ["1", "0", "-1"],
    "--sampler": ["bogus"], "--scheme": ["bogus"], "--dtype": ["float16", "int32", "bogus"],
    "--device": ["bogus", "cuda:99", "tpu"], "--attention": ["bogus"], "--noise": ["bogus"],
    "--law": ["bogus", "rademacher"], "--norm": ["bogus"], "--mlp": ["bogus"],
    "--qk": ["bogus"], "--qk-scale": ["0", "-1", "nan"], "--qk-redraw": ["bogus"],
    "--heads": ["0", "-2"], "--mlp-width": ["0"], "--mlp-sigma": ["-1", "nan"],
    "--eps": ["0.5"], "--init": ["bogus", "{res}/none.npy", "{bad_npy}", "{npz}"],
    "--mean": ["bogus", "{bad_npy}", "{npz}"], "--until": ["bogus"],
    "--value-init": ["bogus"], "--sigma": ["-1", "nan"], "--time": ["1"],
    "--out": ["{res}", "{afile}/x.npz", "{res}/x.txt"],
    "--plot": ["{res}", "{afile}/p.png", "{res}/p.bmp", "{res}/p"],
}
SIM_TIME = [["--time", "1", "--dt", "0.3"], ["--time", "0", "--dt", "0.1"],
            ["--time", "1", "--dt", "0"], ["--time", "-1", "--dt", "0.1"],
            ["--time", "1", "--dt", "2"]]
SIM_LAYERS = [["--layers", "0"], ["--layers", "-3"], ["--layers", "10", "--alpha", "-1"],
              ["--alpha", "0.3"], ["--layers", "10", "--time", "1"]]
MC_BAD: dict[str, list[str]] = {
    "--beta": ["-1", "nan", "x"], "--d": ["1", "2.5", "x", "0"], "--runs": ["0", "-1"],
    "--rho0": ["2", "-1.5", "x", "nan"], "--tol": ["0", "1", "nan", "-1"],
    "--sigma": ["-1", "nan"], "--sampler": ["bogus"], "--mlp": ["bogus"],
    "--mlp-sigma": ["-1"], "--engine": ["bogus"], "--until": ["bogus"], "--seed": ["-1"],
    "--out": ["{res}", "{afile}/x.json", "{res}/x.npz"],
}
MC_TIME = [["--time", "1", "--dt", "0.3"], ["--time", "0"], ["--dt", "0"], ["--dt", "5"],
           ["--time", "-2"], ["--time", "nan"]]
HYB_BAD: dict[str, list[str]] = {
    "--beta": ["-1", "nan"], "--eps": ["-1", "nan"], "--d": ["1", "x"], "--runs": ["0"],
    "--dt": ["0", "-0.1", "0.3"], "--tol": ["0", "2"], "--rho0": ["3"],
    "--engine": ["bogus"], "--out": ["{res}", "{afile}/x.json", "{res}/x.txt"],
}
GRID_BAD: dict[str, list[str]] = {
    "--betas": ["x", "", "1,,x", "-1"], "--ds": ["2.5", "", "1", "x"], "--runs": ["0"],
    "--time": ["0", "-1"], "--figure": ["{res}/g.xyz", "{res}", "{afile}/g.png"],
    "--out": ["{afile}", "{afile}/sub"], "--workers": ["0"], "--rho0": ["2"],
    "--engine": ["bogus"], "--seed": ["-1"],
}


def _with(base: list[str], option: str, value: str) -> list[str]:
    """`base` with `option` set to `value` (replaced when present, else appended)."""
    args = list(base)
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


def cases() -> Iterator[tuple[str, list[str]]]:
    """(label, args) of every bad input; args may hold {res}, {afile}, {sweep}, ... fields."""
    for opt, vals in SIM_BAD.items():
        for v in vals:
            args = _with(SIM, opt, v)
            if opt == "--law" and v == "rademacher":
                args = _with(args, "--noise", "matrix")
            yield f"simulate {opt} {v}", args
            yield f"simulate (text) {opt} {v}", [a for a in args if a != "--json"]
    base = SIM[:-4]
    for extra in SIM_TIME + SIM_LAYERS:
        yield f"simulate {' '.join(extra)}", base + extra
    yield "simulate --eps with matrix noise", _with(SIM, "--eps", "0.3")
    yield "simulate --value-init with --sigma", [*SIM, "--value-init", "pytorch", "--sigma", "1"]
    yield "simulate --n too large", _with(SIM, "--n", "100000000")
    yield "simulate --rho0 without pair", [*SIM, "--init", "pair", "--rho0", "2"]
    # runs that cannot fit or finish, refused before any work (sizes no machine holds or ends)
    yield "simulate --runs beyond memory", [*_with(SIM, "--runs", "1000000000000"),
                                            "--out", "{res}/x.npz"]
    yield "simulate layers beyond the time limit", [*SIM[:-4], "--time", "1e13", "--dt", "0.1",
                                                   "--until", "horizon", "--out", "{res}/x.npz"]
    yield "two-token mc --runs beyond memory", [*_with(MC, "--runs", "1000000000000"),
                                                "--out", "{res}/x.json"]
    yield "two-token mc horizon beyond the time limit", [*_with(MC, "--time", "1e15"),
                                                         "--until", "horizon"]
    yield "two-token mc reduced --runs beyond memory", [
        *_with(MC, "--runs", "100000000000000"), "--engine", "reduced"]
    yield "two-token hybrid --runs beyond memory", _with(HYB, "--runs", "1000000000000")
    yield "meanfield table --runs beyond memory", ["meanfield", "table", "--runs",
                                                   "1000000000000", "--out", "{res}/mf"]
    yield "sweep run cell beyond memory", ["sweep", "run", "{bigcell}", "--out", "{res}/sw"]
    yield "real torch-encoder --inits beyond memory", [
        "real", "torch-encoder", "--inits", "1000000000", "--out", "{res}/real"]
    for cmd, bad in ((MC, MC_BAD), (HYB, HYB_BAD), (GRID, GRID_BAD)):
        for opt, vals in bad.items():
            for v in vals:
                yield f"{' '.join(cmd[:2])} {opt} {v!r}", _with(cmd, opt, v)
    for extra in MC_TIME:
        args = list(MC)
        for o, v in zip(extra[::2], extra[1::2], strict=True):
            args = _with(args, o, v)
        yield f"two-token mc {' '.join(extra)}", args
    for v in ("1", "nan", "x", "-3"):
        yield f"two-token prob --d {v}", ["two-token", "prob", "--beta", "1", "--d", v]
        yield f"two-token critical --d {v}", ["two-token", "critical", "--d", v]
    for opt, v in (("--beta", "-1"), ("--rho0", "2"), ("--rho0", "x"), ("--beta", "nan")):
        yield f"two-token prob {opt} {v}", _with(["two-token", "prob", "--beta", "1", "--d", "3"],
                                                 opt, v)
    # sweeps
    sw = ["sweep", "run", "{cfg}", "--out", "{res}/sw"]
    yield "sweep run missing config", ["sweep", "run", "{res}/none.toml", "--out", "{res}/sw"]
    yield "sweep run config is a dir", ["sweep", "run", "{res}", "--out", "{res}/sw"]
    for name in ("badtoml", "badkind", "badkey", "badgrid", "module", "badparam"):
        yield f"sweep run {name}", ["sweep", "run", f"{{{name}}}", "--out", "{res}/sw"]
    for opt, v in (("--workers", "0"), ("--workers", "-1"), ("--backend", "bogus"),
                   ("--address", "1.2.3.4:6379"), ("--out", "{afile}"), ("--out", "{afile}/x"),
                   ("--out", "{sweep}/cells")):
        yield f"sweep run {opt} {v}", _with(sw, opt, v)
    yield "sweep run other sweep in dir", ["sweep", "run", "{badparam2}", "--out", "{sweep}"]
    for sub in ("status", "table"):
        for where in ("{res}/none", "{afile}", "{res}", "{damaged_sweep}"):
            yield f"sweep {sub} {where}", ["sweep", sub, where]
    for opt, v in (("--format", "bogus"), ("--output", "{afile}/x"), ("--output", "{res}"),
                   ("--format", "xml")):
        yield f"sweep table {opt} {v}", ["sweep", "table", "{sweep}", opt, v]
    for a, b in (("{res}/none", "{res}/figs"), ("{sweep}", "{afile}"), ("{afile}", "{res}/f"),
                 ("{damaged_sweep}", "{res}/f")):
        yield f"sweep plot {a} {b}", ["sweep", "plot", a, b]
    # figures and the report
    for args in (["figure", "bogus"], ["figure"], ["figure", "mlp", "--size", "bogus"],
                 ["figure", "mlp", "--out", "{afile}"], ["figure", "mlp", "--workers", "0"],
                 ["figure", "mlp", "--seed", "-1"],
                 ["figure", "decision-times", "--size", "tiny", "--out", "{damaged_results}"],
                 ["figure", "trajectories", "--size", "tiny", "--out", "{damaged_results}"]):
        yield " ".join(args), args
    rep = ["reproduce", "--size", "tiny", "--out", "{res}/rep"]
    for opt, v in (("--only", "bogus"), ("--only", ""), ("--only", ","), ("--skip", "bogus"),
                   ("--size", "bogus"), ("--out", "{afile}"), ("--out", "{afile}/x"),
                   ("--workers", "0"), ("--seed", "-1")):
        yield f"reproduce {opt} {v!r}", _with(rep, opt, v)
    yield "reproduce --quick --full", ["reproduce", "--quick", "--full", "--out", "{res}/rep"]
    yield "reproduce --skip everything", ["reproduce", "--size", "tiny", "--out", "{res}/rep",
                                          "--skip", "{all_figures}"]
    yield "reproduce over a foreign report", ["reproduce", "--size", "tiny", "--out",
                                              "{foreign_report}", "--only", "mlp"]
    yield "reproduce damaged result", ["reproduce", "--size", "tiny", "--out",
                                       "{res}/copy", "--only", "decision-times"]
    # vit
    for args in (["vit", "compare", "--batch-size", "0", "--out", "{res}/v"],
                 ["vit", "compare", "--dataset", "bogus", "--out", "{res}/v"],
                 ["vit", "compare", "--out", "{afile}"], ["vit", "compare", "--seeds", "0",
                                                          "--out", "{res}/v"],
                 ["vit", "compare", "--epochs", "-1", "--out", "{res}/v"],
                 ["vit", "geometry", "--out", "{afile}/x"],
                 ["vit", "geometry", "--images", "0", "--out", "{res}/v"],
                 ["vit", "depth", "--size", "bogus", "--out", "{res}/v"],
                 ["vit", "depth", "--out", "{afile}"], ["vit", "plot", "--out", "{res}/none"]):
        yield " ".join(args), args


EXPECT_CODE = {"reproduce damaged result": 1}  # the sections ran; one failed


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(path)).encode() + p.read_bytes())
    return h.hexdigest()


def _setup(root: Path) -> dict[str, str]:
    """The files the cases point at: a keepsake file, a finished sweep, damaged files."""
    from tokensde.study import FIGURES
    from tokensde.sweep.engine import run_sweep

    keep = root / "keep"
    keep.mkdir()
    (keep / "afile").write_text("keep me")
    cfg = keep / "small.toml"
    cfg.write_text(SMALL)
    run_sweep(cfg, keep / "sweep")
    damaged = keep / "damaged_sweep"
    shutil.copytree(keep / "sweep", damaged)
    next((damaged / "cells").glob("*.parquet")).write_bytes(b"PAR1 truncated")
    (damaged / "table.parquet").write_bytes(b"PAR1 truncated")
    results = keep / "damaged_results"
    (results / "data").mkdir(parents=True)
    (results / "data" / "decision-times-tiny.npz").write_bytes(b"PK\x03\x04 no archive")
    (results / "data" / "trajectories-tiny").mkdir()
    (results / "data" / "trajectories-tiny" / "d2-noise.npz").write_bytes(b"\x93NUMPY garbage")
    foreign = keep / "foreign"
    foreign.mkdir()
    (foreign / "report.html").write_text("<html>somebody's notes</html>")
    np.save(keep / "bad.npy", np.array(["a", "b"]))
    np.savez(keep / "arr.npz", a=np.eye(3))
    tomls = {"badtoml": "kind = [", "badkind": SMALL.replace("multi_token", "nope"),
             "badkey": SMALL + "\nbogus = 1\n", "badgrid": SMALL.replace("n = [3]", "n = []"),
             "module": 'module = "os"\n' + SMALL, "badparam": SMALL.replace("n = [3]", "n = [0]"),
             "badparam2": SMALL.replace("n = [3]", "n = [4]"),
             "bigcell": SMALL.replace("runs = 4", "runs = 1000000000000")}
    fields = {"afile": str(keep / "afile"), "cfg": str(cfg), "sweep": str(keep / "sweep"),
              "damaged_sweep": str(damaged), "damaged_results": str(results),
              "foreign_report": str(foreign), "bad_npy": str(keep / "bad.npy"),
              "npz": str(keep / "arr.npz"), "all_figures": ",".join(FIGURES)}
    for name, text in tomls.items():
        (keep / f"{name}.toml").write_text(text)
        fields[name] = str(keep / f"{name}.toml")
    return fields


class _Hang(BaseException):  # not caught by `except Exception` in a section build
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang


def classify(label: str, args: list[str], root: Path, fields: dict[str, str]) -> tuple[str, str]:
    """Run one case in a fresh scratch directory; return (class, first line of output)."""
    from typer.testing import CliRunner

    from tokensde.cli import app

    res = root / "res"
    shutil.rmtree(res, ignore_errors=True)
    res.mkdir()
    if "{res}/copy" in args:  # a case that writes its report: on a copy of the damaged results
        shutil.copytree(fields["damaged_results"], res / "copy")
    filled = [a.format(res=res, **fields) for a in args]
    before = _digest(root / "keep")
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    try:
        out = CliRunner().invoke(app, filled)
    except _Hang:
        return "hang", f"over {LIMIT_S} s"
    finally:
        signal.alarm(0)
    text = out.output or ""
    first = next((ln for ln in text.splitlines() if ln.startswith("error")), text[:200])
    if isinstance(out.exception, _Hang):
        return "hang", f"over {LIMIT_S} s"
    if _digest(root / "keep") != before:
        return "lost", first
    if out.exception is not None and not isinstance(out.exception, SystemExit):
        return "traceback", f"{type(out.exception).__name__}: {out.exception}"
    if "Traceback" in text:
        return "traceback", first
    if out.exit_code == 0:
        return "silently wrong", text.strip().splitlines()[-1] if text.strip() else "(no output)"
    if out.exit_code != EXPECT_CODE.get(label, 2) and "Usage:" not in text:
        return "silently wrong", f"exit {out.exit_code}: {first}"
    if out.exit_code == 2 and "error" not in text.lower():
        return "traceback", first
    leftovers = [p for p in res.rglob("*") if p.is_file()]
    if leftovers and out.exit_code == 2:
        return "lost", f"refused but wrote {leftovers[0]}"
    return "clean", first


def run(every: int = 1, verbose: bool = False) -> Counter[str]:
    """Run every `every`-th case; print the count per class and each case not clean."""
    counts: Counter[str] = Counter({c: 0 for c in CLASSES})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fields = _setup(root)
        t0 = time.perf_counter()
        all_cases = list(cases())
        for i, (label, args) in enumerate(all_cases):
            if i % every:
                continue
            cls, line = classify(label, args, root, fields)
            counts[cls] += 1
            if cls != "clean" or verbose:
                print(f"{cls:>15}  {label}: {line}")
        wall = time.perf_counter() - t0
    n = sum(counts.values())
    print(f"{n} of {len(all_cases)} bad inputs in {wall:.1f} s: "
          + ", ".join(f"{c} {counts[c]}" for c in CLASSES))
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=1, help="Run one case in EVERY.")
    parser.add_argument("--verbose", action="store_true", help="Print every case.")
    a = parser.parse_args()
    counts = run(max(1, a.every), a.verbose)
    return 0 if sum(counts.values()) == counts["clean"] else 1


if __name__ == "__main__":
    sys.exit(main())
