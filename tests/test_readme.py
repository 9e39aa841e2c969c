"""README's Python examples run, and print what README says they print."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```\s*\n\s*prints `([^`]*)`", re.S)
EXAMPLES = BLOCK.findall(README.read_text())


def test_readme_has_examples_with_their_output():
    assert EXAMPLES, "README lost its Python examples (a ```python block followed by 'prints `...`')"


@pytest.mark.parametrize(("code", "expected"), EXAMPLES)
def test_readme_example_prints_what_readme_says(code, expected):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected
