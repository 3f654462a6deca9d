"""A lesson outside this repository, as on Colab, Binder or a university's JupyterHub.

For each lesson: a temporary folder holding only its student edition (reference solutions filled
in), a fresh venv in which the course is not installed, and FashionMNIST in a per-user cache.
The lesson's first cell installs the course from the wheel ``make wheel`` builds (pointed to by
``COURSE_PACKAGE`` instead of the network); papermill then runs the lesson in FAST mode.

The fresh venv reaches torch, papermill and the other dependencies through a ``.pth`` file naming a
folder of links to this checkout's venv (reinstalling torch would cost minutes and gigabytes per
lesson); that folder leaves out the course itself, its metadata and its editable-install hook. pip
comes through it too, so the venv is made without a copy of its own (ensurepip costs 4 s of CPU).
"""

import compileall
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest
from conftest import built_once
from lesson_files import LESSONS, read_source, solved_edition, standalone_language, write

from graders.lessons import ROOT

NOT_SHARED = ("course", "graders", "pytorch_course", "__editable__", "setuptools",
              "_distutils_hack", "pkg_resources", "distutils-precedence", "__pycache__")


def build_wheel(out: Path) -> None:
    """The course's wheel in ``out``, built from a private copy of the checkout's files: setuptools
    builds in the source tree (``build/``, ``*.egg-info``), where another build could be running."""
    source = out / "source"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    compileall.compile_dir(source, quiet=1)  # bytecode, as in a checkout that has run its tests
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out),
                            str(source)], capture_output=True, text=True)
    assert built.returncode == 0, f"pip wheel failed:\n{built.stdout}\n{built.stderr}"


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The course's wheel, built once per test run."""
    (wheel_file,) = built_once(tmp_path_factory, "wheel", build_wheel).glob("pytorch_course-*.whl")
    return wheel_file


@pytest.mark.subprocess  # pip builds the wheel
def test_the_wheel_ships_sources_not_bytecode(wheel):
    bytecode = [name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".pyc")]
    assert not bytecode, f"the wheel ships bytecode: {bytecode}"


@pytest.fixture(scope="session")
def shared_dependencies(tmp_path_factory):
    """Links to every package of this venv (pip included) except the course and setuptools."""
    folder = tmp_path_factory.mktemp("dependencies")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(NOT_SHARED) and entry.suffix != ".pth":
            (folder / entry.name).symlink_to(entry)
    return folder


def fresh_venv(folder: Path, dependencies: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([python, "-c", where], check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "course_dependencies.pth").write_text(f"{dependencies}\n")
    return python


def data_cache(home: Path) -> None:
    """FashionMNIST where the course looks outside a checkout: the per-user cache."""
    raw = home / ".cache" / "pytorch-course" / "data" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for source in (ROOT / "data" / "FashionMNIST" / "raw").iterdir():
        shutil.copy(source, raw / source.name)


@pytest.mark.subprocess
@pytest.mark.kernel
@pytest.mark.parametrize("lesson", LESSONS)
def test_a_student_edition_runs_outside_the_repository(lesson, wheel, shared_dependencies, tmp_path):
    language = standalone_language(lesson)
    python = fresh_venv(tmp_path / "venv", shared_dependencies)
    home, work = tmp_path / "home", tmp_path / "work"
    data_cache(home)
    work.mkdir()
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(home), "COURSE_PACKAGE": str(wheel),
           "COURSE_FAST": "1", "COURSE_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    missing = subprocess.run([python, "-c", "import course"], cwd=work, env=env, capture_output=True)
    assert missing.returncode != 0, "the course is importable before the install cell ran"
    notebook = write(solved_edition(lesson, language), work / f"{lesson}.ipynb")
    done = subprocess.run([python, "-m", "papermill", notebook.name, "executed.ipynb", "-k", "python3",
                           "--no-progress-bar"], cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    installed = subprocess.run([python, "-c", "import course; print(course.__file__)"], cwd=work, env=env,
                               capture_output=True, text=True, check=True).stdout
    assert installed.startswith(str(tmp_path / "venv")), installed


@pytest.mark.subprocess
def test_the_install_cell_does_nothing_where_the_course_is_installed(tmp_path):
    edition = nbformat.read(ROOT / "notebooks" / "en" / f"{LESSONS[0]}.ipynb", 4)
    install_cell = next(c.source for c in edition.cells if c.cell_type == "code")
    env = {**os.environ, "COURSE_PACKAGE": str(tmp_path / "no-such-wheel.whl")}
    done = subprocess.run([sys.executable, "-c", install_cell], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_every_lesson_starts_with_the_same_install_cell():
    first_cells = {lesson: next(c.source for c in read_source(lesson).cells if c.cell_type == "code")
                   for lesson in LESSONS}
    assert len(set(first_cells.values())) == 1, first_cells
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert f'"git+{repository}"' in first_cells[LESSONS[0]]
