"""The sandbox's launcher, which starts every graded kernel: what it costs before the kernel runs."""

import subprocess
import sys

import pytest


@pytest.mark.subprocess
def test_the_launcher_imports_neither_torch_nor_the_lesson_helpers():
    """Each graded kernel starts through ``python -m graders.grade.sandbox``; importing torch there
    cost every submission about a second before its own kernel had started (issue 21)."""
    probe = "import sys, graders.grade.sandbox; print(sorted({'torch', 'course'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", f"the sandbox's launcher imports {loaded.stdout.strip()}"
