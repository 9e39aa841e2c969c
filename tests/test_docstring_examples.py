"""Every `>>>` example in a docstring of the package runs and prints what it shows (doctest): no
docstring can show a call that fails. The modules are found statically, so a new example is run
without being listed."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import tokensde

ROOT = Path(tokensde.__file__).parent


def _modules_with_examples() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if ">>> " in path.read_text():
            rel = path.relative_to(ROOT.parent).with_suffix("")
            out.append(".".join(p for p in rel.parts if p != "__init__"))
    return out


MODULES = _modules_with_examples()


def test_the_package_has_runnable_examples():
    assert "tokensde.theory.two_tokens" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS,
                             verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{name}: {result}"


def test_a_wrong_example_fails():
    """The check can fail: an example whose shown output is wrong is counted as a failure."""
    def shown_wrong() -> None:
        """>>> 1 + 1
        3
        """
    runner = doctest.DocTestRunner(verbose=False)
    for test in doctest.DocTestFinder().find(shown_wrong, "shown_wrong", globs={}):
        runner.run(test, out=lambda _: None)
    assert runner.summarize(verbose=False).failed == 1
