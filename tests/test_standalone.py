"""The course outside this repository: the wheel a student's first cell installs, and that cell.

Each lesson runs on a student's machine (:mod:`student_machine`: a fresh venv, the wheel, a home
outside this checkout) in JupyterLab, in test_browser.py.
"""

import os
import subprocess
import sys
import tomllib
import zipfile

import nbformat
import pytest
from lesson_files import LESSONS, read_solution

from graders.lessons import ROOT


@pytest.mark.subprocess  # pip builds the wheel
def test_the_wheel_ships_sources_not_bytecode(wheel):
    bytecode = [name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".pyc")]
    assert not bytecode, f"the wheel ships bytecode: {bytecode}"


@pytest.mark.subprocess
def test_the_install_cell_does_nothing_where_the_course_is_installed(tmp_path):
    edition = nbformat.read(ROOT / "notebooks" / "en" / f"{LESSONS[0]}.ipynb", 4)
    install_cell = next(c.source for c in edition.cells if c.cell_type == "code")
    env = {**os.environ, "COURSE_PACKAGE": str(tmp_path / "no-such-wheel.whl")}
    done = subprocess.run([sys.executable, "-c", install_cell], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_every_lesson_starts_with_the_same_install_cell():
    first_cells = {lesson: next(c.source for c in read_solution(lesson).cells if c.cell_type == "code")
                   for lesson in LESSONS}
    assert len(set(first_cells.values())) == 1, first_cells
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert f'"git+{repository}"' in first_cells[LESSONS[0]]
