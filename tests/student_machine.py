"""A student's machine, outside this repository: the course's wheel, a fresh venv in which the course
is not installed, and a home whose per-user cache holds FashionMNIST (as on Colab, Binder or a
university's JupyterHub). A lesson's first cell installs the course from the wheel, pointed to by
``COURSE_PACKAGE`` instead of the network.

The fresh venv reaches torch, JupyterLab and the other dependencies through a ``.pth`` file naming a
folder of links to this checkout's venv (reinstalling torch would cost minutes and gigabytes); that
folder leaves out the course itself, its metadata and its editable-install hook. pip comes through
it too, so the venv is made without a copy of its own (ensurepip costs 4 s of CPU). JupyterLab's
own files (its pages, the widgets' extension) are found where the checkout's venv installed them.
"""

import compileall
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from graders.lessons import ROOT

NOT_SHARED = ("course", "graders", "pytorch_course", "__editable__", "setuptools",
              "_distutils_hack", "pkg_resources", "distutils-precedence", "__pycache__")
_JUPYTER_DATA = Path(sys.prefix) / "share" / "jupyter"


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


def link_dependencies(folder: Path) -> Path:
    """``folder``, filled with links to every package of this venv (pip included) but the course's."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(NOT_SHARED) and entry.suffix != ".pth":
            (folder / entry.name).symlink_to(entry)
    return folder


def fresh_venv(folder: Path, dependencies: Path) -> Path:
    """A venv in ``folder`` that reaches ``dependencies``; its Python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([python, "-c", where], check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "course_dependencies.pth").write_text(f"{dependencies}\n")
    return python


def student_home(home: Path) -> Path:
    """``home`` with FashionMNIST where the course looks outside a checkout: the per-user cache."""
    raw = home / ".cache" / "pytorch-course" / "data" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for source in (ROOT / "data" / "FashionMNIST" / "raw").iterdir():
        shutil.copy(source, raw / source.name)
    return home


def student_environment(python: Path, home: Path, wheel: Path, **extra) -> dict:
    """The environment of a student's session: the venv's Python first on PATH, the home, the wheel
    as the course's package, JupyterLab's files, and ``extra``."""
    return {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(home), "COURSE_PACKAGE": str(wheel),
            "JUPYTER_PATH": str(_JUPYTER_DATA), "JUPYTERLAB_DIR": str(_JUPYTER_DATA / "lab"),
            "OMP_NUM_THREADS": "1", **extra}


def where_course_is(python: Path, env: dict, cwd: Path) -> str:
    """Where ``python`` finds the course's package (its ``__init__.py``), or ``""``: found without
    running it."""
    find = ("import importlib.util; spec = importlib.util.find_spec('course'); "
            "print(spec.origin if spec else '')")
    return subprocess.run([python, "-c", find], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
