"""The two sides stay apart: code that runs in a student's kernel never imports the host side."""

import ast
import subprocess
import sys

import pytest

from graders.lessons import ROOT

# What a kernel imports: the lesson helpers, the checks, and the kernel's start-up.
LESSON_CHECKS = sorted((ROOT / "graders" / "lesson_checks").glob("*.py"))
KERNEL_SIDE = [*sorted((ROOT / "course").rglob("*.py")), ROOT / "graders" / "checks.py",
               ROOT / "graders" / "kernel_startup.py", *LESSON_CHECKS]
KERNEL_MODULES = {"graders.checks", "graders.kernel_startup", "graders.lesson_checks"} | {
    f"graders.lesson_checks.{path.stem}" for path in LESSON_CHECKS if path.stem != "__init__"}


def _imported_modules(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_kernel_side_modules_import_nothing_from_the_host_side():
    crossing = {str(path.relative_to(ROOT)): sorted(
        name for name in _imported_modules(path)
        if name.startswith("graders") and name != "graders" and name not in KERNEL_MODULES
        and not any(name.startswith(f"{module}.") for module in KERNEL_MODULES))
        for path in KERNEL_SIDE}
    assert not {path: names for path, names in crossing.items() if names}


@pytest.mark.subprocess
def test_a_kernel_that_imports_every_lesson_helper_loads_no_host_module():
    code = ("import pkgutil, importlib, sys, course, graders.checks, graders.kernel_startup\n"
            "import graders.lesson_checks; graders.lesson_checks.lesson_modules()\n"
            "for info in pkgutil.walk_packages(course.__path__, 'course.'):\n"
            "    importlib.import_module(info.name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('graders.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=ROOT, env={"MPLBACKEND": "Agg", "PATH": ""}).stdout
    assert loaded.strip() == str(sorted(KERNEL_MODULES))
