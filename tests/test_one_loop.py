"""One layer loop: `tokensde.sim.loop._march` applies the layers; no other loop in src/tokensde may.

The source is parsed with `ast`. A *layer loop* is a `for` or `while` loop whose body calls,
directly (not inside a function or lambda defined in the body), a function that applies a piece of
a layer (`LAYER_FUNCTIONS`: attention, noise, a norm or residual step), or a function or method
of the same module whose own body calls one. Loops in `CORE` are the run core. The loops that
exist elsewhere are listed by name below, each with its reason: `DEBT` holds the layer loops still
to be folded into the core, `NOT_LAYER_LOOPS` the loops the scan finds that step each of several
systems or batches once. A new loop fails `test_no_new_layer_loop`; a listed one that is gone
fails `test_every_listed_loop_still_exists`, so that the lists shrink as the debt is paid (the
last, the mean-field flow's `_advance`, now runs through `_march`: `DEBT` is empty).

Wider than layers: a *step loop* is any loop over steps, of any state, tokens or not: a `for`
loop or a comprehension over a `range` whose bounds name a number of steps (`steps`,
`grid.steps`, `ref_steps`, ...); a `for`, comprehension or `while` over any count (a `range`, a
condition) whose own body calls a step function (a layer function, or a name ending in 'step':
`step`, `sde_step`, `opt.step`); a `while` loop that advances a clock its condition reads (`t +=
dt`, `clock = clock + h`, `k += 1` in `while k < steps`: a time variable, a step size, or a
number of steps); and any loop or comprehension whose own body draws Gaussian increments
(`randn`, `standard_normal`, `normal`). Those outside `_march` are listed in `STEP_LOOPS` with
their reason. And one batch driver:
run streams (`RunStreams(...)`) are made only by `sim.rng` and the driver `sim.driver.run_blocks`,
or at the places listed in `STREAMS`.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

import tokensde

ROOT = Path(tokensde.__file__).resolve().parent

# the functions that apply a piece of a layer to the tokens (tokensde.sim.layers, .sde,
# .norm_sde, .samplers, .gram, .expansion, tokensde.model.noise) and the loop itself
LAYER_FUNCTIONS: frozenset[str] = frozenset({
    "_attention_output", "expansion_output",  # attention
    "apply_matrices", "_full_noise", "_fast_noise", "_peri_noise",  # value noise
    "_mlp_noise_full", "_mlp_noise_fast", "mlp_noise_sde", "_mlp_noise_given", "_mlp_kernel_noise",
    "normalize", "network_step", "sde_step", "_layer_step", "_residual_step", "_peri_sde_step",
    "_sde_layer", "frame_layer", "frame_norm_layer", "frame_mlp_layer",  # steps
    "_march",
})

# the run core: the one layer loop
CORE: dict[str, str] = {"sim/loop.py": "_march: apply `layer` `steps` times, record, stop"}

# known debt: layer loops outside the core, to be folded into `_march` (then removed from here);
# none is left: a new one must be listed here with its reason, or better folded at once
DEBT: dict[str, str] = {}

# loops the scan finds that are not layer loops: each steps several systems or batches once
NOT_LAYER_LOOPS: dict[str, str] = {
    "sim/coupled.py::_Levels.__call__":
        "one fine step (the layer _march applies): each coarse grid whose step it ends, once",
    "sim/coupled.py::_Coupling.networks":
        "one layer of each value-noise law's network, called by _Levels' fine step",
    "meanfield/flow.py::_Layer.__call__":
        "one layer (the layer _march applies) of each weighted system of the mean-field flow",
}

# step loops outside `_march`, each with its reason (`step_loops`)
STEP_LOOPS: dict[str, str] = {
    "theory/first_passage.py::angle_first_exit":
        "not a march on a layer grid: each path of theta takes its own step h = min(dt, kappa "
        "g^2 / c) and keeps its own clock, so iteration k is a different time on each path, the "
        "number of iterations is not known before (_march applies a layer a fixed `steps` "
        "times), and a path leaves when a Brownian-bridge crossing drawn inside the step (from "
        "the step's start and end) hits a barrier or its clock passes t_max, not on a test of "
        "the state every `every` layers; an event-driven first-exit sampler of numpy paths",
    "theory/decision_time.py::survival_law":
        "implicit steps of a PDE (the survival function), not random paths",
    "meanfield/flow.py::noise_path":
        "draws the value matrices V_1..V_steps of one run (its noise path, as the flow draws "
        "them), no state stepped",
    "vit/estimate.py::time_steps": "training steps of a ViT being timed",
    "vit/train.py::train_epoch": "optimizer steps of one training epoch of a ViT",
    "vit/stack.py::_train_stack": "optimizer steps of the epochs of stacked ViTs trained together",
    "vit/estimate.py::time_stack_steps": "training steps of stacked ViTs being timed",
    "real/models.py::_gpt2": "draws the initial weights of each block",
    "vit/init.py::apply_value_init": "draws the value weights of each block",
    "study/trajectories.py::_trajectory_setups": "draws the initial tokens of each panel",
}

# where run streams are made outside `sim.rng` and the batch driver, each with its reason
STREAMS: dict[str, str] = {
    "meanfield/flow.py::path_streams":
        "the streams of runs [lo, hi) not on a block boundary: run_blocks' `streams` in the "
        "flow (and noise_path)",
    "analysis/level_samples.py::coupled_samples.advance":
        "the initial tokens' own streams (a derived seed) beside the driver's",
}


def _own_nodes(node: ast.AST) -> list[ast.AST]:
    """The nodes of `node`'s body (of a loop: its body and `else`), not inside a function,
    lambda or class defined there."""
    if isinstance(node, ast.For | ast.AsyncFor | ast.While):
        stack: list[ast.AST] = [*node.body, *node.orelse]
    else:
        stack = list(ast.iter_child_nodes(node))
    found = []
    while stack:
        n = stack.pop()
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        found.append(n)
        stack.extend(ast.iter_child_nodes(n))
    return found


def _own_calls(node: ast.AST) -> list[ast.Call]:
    """The calls in `node`'s body, not inside a function, lambda or class defined there."""
    return [n for n in _own_nodes(node) if isinstance(n, ast.Call)]


def _package_names(tree: ast.Module) -> set[str]:
    """Names bound by the module's imports from tokensde (relative or absolute): `layers` of
    `from . import layers`, so that `layers.normalize(...)` counts and `kind.normalize(...)`
    or `F.normalize(...)` (torch) does not."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                "tokensde")):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names
                      if a.name.startswith("tokensde")}
    return names


def _applies(call: ast.Call, local: set[str], package: set[str]) -> str | None:
    """The name of the layer function `call` calls, or None."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id if f.id in LAYER_FUNCTIONS | local else None
    if isinstance(f, ast.Attribute):
        if f.attr in local:  # a method or function of this module (self.step(...), c.sde(...))
            return f.attr
        if f.attr in LAYER_FUNCTIONS and isinstance(f.value, ast.Name) and f.value.id in package:
            return f.attr
    return None


@cache
def _tree(source: str) -> ast.Module:
    """The parsed source (each module is read by several checks; the trees are not changed)."""
    return ast.parse(source)


def layer_loops(source: str) -> dict[str, list[str]]:
    """The layer loops of a module's source: qualified name of the enclosing function (or
    '<module>') -> the layer functions its loops call."""
    tree = _tree(source)
    package = _package_names(tree)
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    local: set[str] = set()
    while True:  # the module's functions that apply a layer, directly or through each other
        more = {n.name for n in defs if any(_applies(c, local, package) for c in _own_calls(n))}
        if more <= local:
            break
        local |= more
    out: dict[str, list[str]] = {}

    def visit(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, [*where, child.name])
                continue
            if isinstance(child, ast.For | ast.AsyncFor | ast.While):
                called = {a for c in _own_calls(child) if (a := _applies(c, local, package))}
                if called:
                    key = ".".join(where) or "<module>"
                    out[key] = sorted(set(out.get(key, [])) | called)
            visit(child, where)

    visit(tree, [])
    return out


@cache
def _scan() -> dict[str, list[str]]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in CORE:
            continue
        for where, called in layer_loops(path.read_text()).items():
            found[f"{rel}::{where}"] = called
    return found


@pytest.mark.xdist_group("source-scan")  # one worker parses each module once
def test_no_new_layer_loop():
    found = _scan()
    new = {k: v for k, v in found.items() if k not in DEBT and k not in NOT_LAYER_LOOPS}
    assert new == {}, (
        "a loop outside the run core applies layers (it calls the functions shown); run the "
        "layers with tokensde.sim.loop._march instead (its `record` and `stop` hooks, or an "
        f"observer): {new}")


@pytest.mark.xdist_group("source-scan")  # one worker parses each module once
def test_every_listed_loop_still_exists():
    found = _scan()
    gone = sorted(k for k in (*DEBT, *NOT_LAYER_LOOPS) if k not in found)
    assert gone == [], f"no longer a layer loop (remove from the lists in this file): {gone}"
    assert all((ROOT / k).is_file() for k in CORE)
    assert not set(DEBT) & set(NOT_LAYER_LOOPS)


PLANTED = '''
from .layers import _attention_output, network_step
from . import layers
from ..model.noise import apply_matrices


def second_loop(x, p, v, steps):
    for _ in range(steps):
        y = _attention_output(x, p)
        x = network_step(x, y, apply_matrices(y, v), p, 0.1)
    return x


def hidden(x, p):
    return layers.normalize(x + _attention_output(x, p))


class Runner:
    def step(self, x):
        return hidden(x, self.p)

    def run(self, x, k):
        while k > 0:
            x = self.step(x)
            k -= 1
        return x


def by_module(x, k):
    for _ in range(k):
        x = layers.normalize(2 * x)
    return x


def harmless(config, kind, xs, F):
    for c in config:
        kind.normalize(c)  # not the layer's normalize
    for x in xs:
        F.normalize(x)  # torch.nn.functional
    for x in xs:
        f = lambda t: _attention_output(t, None)  # defined, not called, in the loop  # noqa: E731
    return f
'''


def test_the_scan_finds_a_planted_layer_loop():
    found = layer_loops(PLANTED)
    assert found == {
        "second_loop": ["_attention_output", "apply_matrices", "network_step"],
        "Runner.run": ["step"],  # through a method of the module that applies a layer
        "by_module": ["normalize"],
    }


def test_the_meanfield_flow_goes_through_march():
    # the coupled weighted systems (meanfield/flow.py) have no layer loop of their own but
    # _march's: `_Layer` is the layer, `_Absorb` the stopping rule (merging, decisions), and no
    # loop over batches but the driver's
    source = (ROOT / "meanfield" / "flow.py").read_text()
    found = layer_loops(source)
    assert set(found) == {"_Layer.__call__"}
    assert {"apply_matrices", "_attention_output"} <= set(found["_Layer.__call__"])
    assert "_march(" in source and "run_blocks(" in source


def test_the_coupled_levels_go_through_march():
    # the coupled schemes (sim/coupled.py) have no layer loop of their own but _march's, and the
    # modules they came from none at all
    found = layer_loops((ROOT / "sim" / "coupled.py").read_text())
    assert set(found) == {"_Levels.__call__", "_Coupling.networks"}
    assert "_march(" in (ROOT / "sim" / "coupled.py").read_text()
    for module in ("sim/sde.py", "analysis/convergence.py"):
        assert layer_loops((ROOT / module).read_text()) == {}, module


DRAWS: frozenset[str] = frozenset({"randn", "standard_normal", "normal", "normal_"})


def _names_steps(node: ast.AST) -> bool:
    """`node` names a number of steps: a name or attribute with 'steps' in it."""
    for n in ast.walk(node):
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) \
            else ""
        if "steps" in name.lower():
            return True
    return False


def _called(c: ast.Call) -> str | None:
    """The name a call calls: `f` of `f(...)` and of `a.b.f(...)`."""
    f = c.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _steps_range(it: ast.AST) -> bool:
    """`it` is `range(...)` of a number of steps."""
    return isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" \
        and any(_names_steps(a) for a in it.args)


def _is_step_function(name: str | None) -> bool:
    """A function that advances a state one step: a layer function or a name ending in
    'step' (`step`, `sde_step`, `self._step`, ...)."""
    return name is not None and (name in LAYER_FUNCTIONS or name.lower().endswith("step"))


def _dotted(node: ast.AST) -> str | None:
    """'t' of a name `t`, 'self.t' of an attribute `self.t` (else None)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (head := _dotted(node.value)) is not None:
        return f"{head}.{node.attr}"
    return None


def _is_clock(name: str | None) -> bool:
    """A time variable by its name: `t`, `tau`, or one naming a time or a clock."""
    last = (name or "").rsplit(".", 1)[-1].lower()
    return last in ("t", "tau") or "time" in last or "clock" in last


def _is_step_size(node: ast.AST) -> bool:
    """`node` names a step size: `dt`, `h`, `grid.dt`, `step_size`, ..."""
    return any((last := d.rsplit(".", 1)[-1].lower()) == "h" or "dt" in last or "step" in last
               for n in ast.walk(node) if (d := _dotted(n)) is not None)


def _advances(loop: ast.While) -> bool:
    """The `while` loop advances a clock its condition reads: it adds to (or takes from) a
    variable of the condition (`t += dt`, `t = t + h`, `k += 1`) that is a time (`_is_clock`),
    by a step size (`_is_step_size`), or against a number of steps (`while k < steps`)."""
    read = {d for n in ast.walk(loop.test) if (d := _dotted(n)) is not None}
    against_steps = _names_steps(loop.test)
    for n in _own_nodes(loop):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add | ast.Sub):
            var, amount = _dotted(n.target), n.value
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(
                n.value, ast.BinOp) and isinstance(n.value.op, ast.Add | ast.Sub) and (
                _dotted(n.value.left) == _dotted(n.targets[0])):
            var, amount = _dotted(n.targets[0]), n.value.right
        else:
            continue
        if var in read and (against_steps or _is_clock(var) or _is_step_size(amount)):
            return True
    return False


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _is_step_loop(loop: ast.AST) -> bool:
    """A loop over steps (module docstring): a `for` or comprehension over `range(...)` of a
    number of steps, or over any `range(...)` calling a step function; a `while` advancing a
    clock (`_advances`) or calling a step function; any loop or comprehension drawing
    Gaussians itself."""
    iters = ([loop.iter] if isinstance(loop, ast.For | ast.AsyncFor) else
             [g.iter for g in loop.generators] if isinstance(loop, _COMPREHENSIONS) else [])
    if any(_steps_range(it) for it in iters):
        return True
    names = {_called(c) for c in _own_calls(loop)}
    if names & DRAWS:
        return True
    counted = isinstance(loop, ast.While) or any(
        isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
        for it in iters)
    stepping = any(_is_step_function(n) for n in names)
    return (counted and stepping) or (isinstance(loop, ast.While) and _advances(loop))


def _where(tree: ast.Module, found: type[ast.AST] | tuple[type[ast.AST], ...],
           keep) -> set[str]:
    """Qualified names of the functions (or '<module>') holding a node of type `found` for
    which `keep(node)` holds."""
    out: set[str] = set()

    def visit(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, [*where, child.name])
                continue
            if isinstance(child, found) and keep(child):
                out.add(".".join(where) or "<module>")
            visit(child, where)

    visit(tree, [])
    return out


def step_loops(source: str) -> set[str]:
    """Where a module's source has a step loop (see the module's docstring)."""
    return _where(_tree(source), (ast.For, ast.AsyncFor, ast.While, *_COMPREHENSIONS),
                  _is_step_loop)


def stream_makers(source: str) -> set[str]:
    """Where a module's source calls `RunStreams(...)`."""
    return _where(_tree(source), ast.Call, lambda c: (
        c.func.id if isinstance(c.func, ast.Name) else getattr(c.func, "attr", None))
        == "RunStreams")


def _scan_all(find) -> set[str]:
    return {f"{rel}::{where}" for path in sorted(ROOT.rglob("*.py"))
            if (rel := path.relative_to(ROOT).as_posix()) not in CORE
            for where in find(path.read_text())}


@pytest.mark.xdist_group("source-scan")  # one worker parses each module once
def test_no_step_loop_outside_the_driver():
    found = _scan_all(step_loops)
    assert found - set(STEP_LOOPS) == set(), (
        "a loop steps a state through time outside tokensde.sim.loop._march; run it through "
        f"_march (and sim.driver.run_blocks), or list it in STEP_LOOPS with its reason: "
        f"{sorted(found - set(STEP_LOOPS))}")
    assert set(STEP_LOOPS) - found == set(), (
        f"no longer a step loop (remove from STEP_LOOPS): {sorted(set(STEP_LOOPS) - found)}")


@pytest.mark.xdist_group("source-scan")  # one worker parses each module once
def test_run_streams_are_made_by_the_driver():
    found = _scan_all(stream_makers) - {f"sim/rng.py::{w}" for w in (
        "RunStreams.derived",)} - {"sim/driver.py::run_blocks"}
    assert found == set(STREAMS), (
        f"run streams made outside sim.driver.run_blocks (batch runs through it, or list the "
        f"place in STREAMS with its reason): new {sorted(found - set(STREAMS))}, gone "
        f"{sorted(set(STREAMS) - found)}")


PLANTED_STEPS = '''
import numpy as np


def euler(z, grid, rng):
    for k in range(1, grid.steps + 1):
        z = z + rng.standard_normal(z.shape)
    return z


def absorb(theta, rng):
    while theta.size:
        theta = theta[theta + rng.standard_normal(theta.size) > 0]
    return theta


def clock(x, T, dt, f):
    t = 0.0
    while t < T:  # a time variable advanced by the step
        x = x + f(x) * dt
        t += dt
    return x


def counted(x, steps, f):
    k = 0
    while k < steps:  # a counter against a number of steps
        x = f(x)
        k = k + 1
    return x


def by_depth(x, depth, model):
    for _ in range(depth):  # any count, calling a step function
        x = model.sde_step(x)
    return x


def listed(x, steps, f):
    return [f(x) for _ in range(steps)]  # a comprehension over the steps


def drawn(rng, n):
    return {k: rng.standard_normal(3) for k in range(n)}  # a comprehension drawing


def advanced(theta, h, cap):
    elapsed = 0.0
    while theta.size and elapsed < cap:
        theta = theta[theta > 0.1]
        elapsed = elapsed + h
    return theta


def harmless(items, n_layers, systems, schemes, top):
    for k in range(n_layers):
        items.append(k)
    for x in items:
        f = lambda: np.random.randn()  # defined, not called, in the loop  # noqa: E731
    for s in systems:  # each system stepped once: not a loop over steps
        s.x = s.step(s.x)
    chosen = {s: choose_step(s) for s in schemes}  # over a collection
    m, order = 1, 0
    while m < top:  # doubling, not a clock
        m += m
    while order < top:  # a search over orders, not a clock
        order += 1
    while m > 0:
        m = m - 1  # a countdown not against steps, nothing stepped
    return f, chosen, order


def streams(seed, runs):
    return RunStreams(seed, runs)
'''


def test_the_scans_find_planted_step_loops_and_streams():
    assert step_loops(PLANTED_STEPS) == {"euler", "absorb", "clock", "counted", "by_depth",
                                         "listed", "drawn", "advanced"}
    assert stream_makers(PLANTED_STEPS) == {"streams"}
    # the driver itself makes the streams, and _march is the one step loop of sim/loop.py
    assert stream_makers((ROOT / "sim" / "driver.py").read_text()) == {"run_blocks"}
    assert step_loops((ROOT / "sim" / "loop.py").read_text()) == {"_march"}


def test_the_reduced_paths_go_through_march():
    # the Euler paths of z = artanh rho (sim/reduced.py) are stepped by _march, a state of one z
    # per run, and theory/ keeps no path loop of z
    source = (ROOT / "sim" / "reduced.py").read_text()
    assert step_loops(source) == set() and "_march(" in source
    assert "z_paths" not in step_loops((ROOT / "theory" / "first_passage.py").read_text())
