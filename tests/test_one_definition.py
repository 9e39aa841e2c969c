"""Each statistic has one definition in src/tokensde, and every other place calls it.

The source is parsed with `ast` and searched for the computations themselves: the upper-triangle
pair extraction (`triu_indices`, defined in `clusters.upper_pairs`), the merged / antipodal tests
(`1 - g < tol`, `g > 1 - tol`, ..., in `clusters.is_merged` / `is_antipodal`), `beta_c` (an
`arccosh`, in `two_tokens.beta_c`) and figure saving (`savefig`, in `plots.style._save`).
The outcome classes (`clusters.Outcome`) are checked by the tests of their callers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tokensde

ROOT = Path(tokensde.__file__).resolve().parent

# where each computation may stand (paths relative to src/tokensde), and why
ALLOWED: dict[str, dict[str, str]] = {
    "pairs": {
        "analysis/clusters.py": "the definition (upper_pairs)",
        "sim/result.py": "SimResult.to_pandas lists the pairs i < j (sim is below analysis)",
        "sim/gram.py": "the upper entries of a Bartlett factor, not token pairs",
    },
    "near": {
        "analysis/clusters.py": "the definition (is_merged, is_antipodal)",
    },
    "beta_c": {"theory/coefficients.py": "the definition (beta_critical; two_tokens.beta_c checks it)"},
    "savefig": {"plots/style.py": "the definition (save)"},
}


def _is_one(node: ast.AST) -> bool:
    """`1`, `1.0`, `-1` or `-1.0`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and node.value in (1, 1.0)


def _is_tol(node: ast.AST) -> bool:
    """A name or attribute called `tol` (or `*_tol`)."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name == "tol" or name.endswith("_tol")


def _shifted(node: ast.AST, by_tol: bool) -> bool:
    """`+-1 -+ tol` (by_tol) or `+-1 -+ <anything>`."""
    return (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))
            and _is_one(node.left) and (_is_tol(node.right) or not by_tol))


def _kinds(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "triu_indices":
                found.add("pairs")
            elif name in ("arccosh", "acosh"):
                found.add("beta_c")
            elif name == "savefig":
                found.add("savefig")
        elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
            left, right = node.left, node.comparators[0]
            # g > 1 - tol, g < -1 + tol (either side), or 1 - g < tol, 1 + g < tol
            if (_shifted(left, True) or _shifted(right, True)
                    or (_shifted(left, False) and _is_tol(right))
                    or (_shifted(right, False) and _is_tol(left))):
                found.add("near")
    return found


def _where() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {kind: set() for kind in ALLOWED}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for kind in _kinds(ast.parse(path.read_text(), filename=str(path))):
            out[kind].add(rel)
    return out


@pytest.mark.parametrize("kind", sorted(ALLOWED))
def test_each_statistic_is_computed_in_one_place(kind):
    where = _where()[kind]
    extra = sorted(where - set(ALLOWED[kind]))
    assert not extra, (f"{kind} is computed again in {extra}: call the definition in "
                       f"{next(iter(ALLOWED[kind]))}")
    defined = next(iter(ALLOWED[kind]))
    assert defined in where, f"the definition of {kind} is no longer in {defined}: update ALLOWED"


def test_the_scan_sees_every_form():
    code = """
a = g > 1 - tol
b = g < -1 + tol
c = 1.0 - g < tol
d = 1 + g < self.tol
e = np.triu_indices(n, 1)
f = 0.5 * math.acosh(d - 2)
fig.savefig(path)
"""
    assert _kinds(ast.parse(code)) == {"pairs", "near", "beta_c", "savefig"}
    assert _kinds(ast.parse("x = 1.0 - g\ny = g < 0.5\nz = 1 - p < 0.1")) == set()
