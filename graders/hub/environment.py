"""The Python every hub user runs: this environment's packages with the course installed from its
wheel, on an interpreter every user can reach, in ``<hub_dir>/python``, outside the repository.

Users' servers, kernels and nbgrader commands run as those users, and no student may read the
repository (it holds every lesson's solutions and hidden tests). So users import the course from its
wheel (``make wheel``), as on a university's hub, never through this environment's editable install,
which reads the repository. :func:`users_bin` builds a virtual environment whose packages are this
environment's files, hard-linked (no space; the grader's sandbox finds them under its own prefix),
with the wheel installed in place of the editable install, ``share/`` and ``etc/`` (JupyterLab's
application, the extensions' switches) hard-linked too, and this environment's scripts pointed at it.
Where this environment's interpreter lies in a folder other users cannot enter (a pyenv or conda
Python in root's home, mode 700), the environment runs on a copy of it: its standard library
hard-linked, its binary copied and told to load its own ``libpython`` from beside it. Made again at
every start, it follows what is installed here and the wheel of the day. (The system's Python of the
same minor version is no substitute: a different patch release broke nbconvert's HTML export in the
feedback.)
"""

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

# Where a copied interpreter finds libpython: the dynamic loader's own "beside me" syntax.
OWN_LIBRARIES = b"$ORIGIN/../lib"


class EnvironmentProblem(RuntimeError):
    """No Python that every user can run holds the course's packages."""


def reachable_by_everyone(path: Path) -> bool:
    """Whether any user can reach and run ``path``: every folder above it searchable by others."""
    path = Path(path).resolve()
    return all(os.stat(folder).st_mode & stat.S_IXOTH for folder in path.parents) and \
        bool(os.stat(path).st_mode & stat.S_IXOTH)


def users_bin(hub_dir: Path, wheel: Path) -> Path:
    """The folder of the executables (python, jupyterhub-singleuser, nbgrader, course) users run,
    made again in ``<hub_dir>/python`` with the course from ``wheel``."""
    view = Path(hub_dir) / "python"
    if view.exists():
        shutil.rmtree(view)
    interpreter = Path(sys.executable).resolve()
    if not reachable_by_everyone(interpreter):
        interpreter = _copy_interpreter(Path(sys.base_prefix), view / "base")
    bin_dir = _environment(Path(sys.prefix), view, interpreter)
    _install_wheel(bin_dir / "python", wheel)
    if not reachable_by_everyone(bin_dir / "python"):
        raise EnvironmentProblem(f"The users' Python, {bin_dir / 'python'}, lies in a folder other users "
                                 f"cannot enter: choose a --hub-dir whose folders are all searchable "
                                 f"(chmod o+x), such as the default /srv/pytorch-course-hub.")
    return bin_dir


def _link_tree(source: Path, target: Path) -> None:
    """``target`` a copy of ``source`` whose files are hard links (no space, same permissions); a
    plain copy where the two lie on different filesystems, which hard links cannot cross."""
    same_filesystem = os.stat(source).st_dev == os.stat(target.parent).st_dev
    subprocess.run(["cp", "-a", *(["--link"] if same_filesystem else []), str(source), str(target)],
                   check=True)


def _copy_interpreter(base: Path, target: Path) -> Path:
    """The interpreter of ``base`` (its binary, libpython and standard library) under ``target``."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    binary = Path(sys.executable).resolve()
    (target / "bin").mkdir(parents=True)
    (target / "lib" / version).mkdir(parents=True)
    for entry in (base / "lib" / version).iterdir():
        if entry.name != "site-packages":
            _link_tree(entry, target / "lib" / version / entry.name)
    (target / "lib" / version / "site-packages").mkdir()
    for library in (base / "lib").glob("libpython*.so*"):
        _link_tree(library, target / "lib" / library.name)
    code = binary.read_bytes()
    original = str(base / "lib").encode()
    if code.count(original + b"\0") != 1:
        raise EnvironmentProblem(
            f"This environment's Python ({binary}) lies in a folder other users cannot enter, and its "
            f"copy cannot be pointed at its own libraries. Create the environment from a Python every "
            f"user can run (rm -rf .venv && make setup PYTHON=/usr/bin/python3), or make the folders "
            f"above it searchable (chmod o+x).")
    # the loader's search path is a string of the binary's own: the new one is shorter, NUL-padded
    code = code.replace(original + b"\0", OWN_LIBRARIES + b"\0" * (len(original) + 1 - len(OWN_LIBRARIES)))
    (target / "bin" / version).write_bytes(code)
    (target / "bin" / version).chmod(0o755)
    for folder in (target, target / "bin", target / "lib", target / "lib" / version,
                   target / "lib" / version / "site-packages"):
        folder.chmod(0o755)
    return target / "bin" / version


def _environment(prefix: Path, view: Path, interpreter: Path) -> Path:
    """A virtual environment at ``view`` on ``interpreter``, with ``prefix``'s packages and scripts."""
    (view / "bin").mkdir(parents=True)
    (view / "bin" / "python").symlink_to(interpreter)
    for alias in ("python3", f"python{sys.version_info.major}.{sys.version_info.minor}"):
        (view / "bin" / alias).symlink_to("python")
    info = sys.version_info
    (view / "pyvenv.cfg").write_text(f"home = {interpreter.parent}\ninclude-system-site-packages = false\n"
                                     f"version = {info.major}.{info.minor}.{info.micro}\n")
    for shared in ("lib", "share", "etc"):
        if (prefix / shared).exists():
            _link_tree(prefix / shared, view / shared)
    shebang = f"#!{prefix / 'bin'}/python".encode()
    for script in (prefix / "bin").iterdir():
        # the course's own script comes with its wheel
        if script.is_file() and not script.is_symlink() and script.name != "course" \
                and script.read_bytes().startswith(shebang):
            _, _, body = script.read_bytes().partition(b"\n")
            target = view / "bin" / script.name
            target.write_bytes(f"#!{view / 'bin' / 'python'}\n".encode() + body)
            target.chmod(0o755)
    for folder in (view, view / "bin"):
        folder.chmod(0o755)
    (view / "pyvenv.cfg").chmod(0o644)
    return view / "bin"


def _install_wheel(python: Path, wheel: Path) -> None:
    """The course from ``wheel`` in place of the editable install the packages came with (pip
    removes that one's hook and metadata, here only: the files it adds are new, not links)."""
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--force-reinstall",
               "--disable-pip-version-check", str(wheel)]
    done = subprocess.run(install, capture_output=True, text=True,
                          env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"})
    if done.returncode != 0:
        raise EnvironmentProblem(f"The course's wheel {wheel} does not install in the users' Python: "
                                 f"{(done.stderr or done.stdout).strip()[-800:]}")


def imports_from(python: Path, folder: Path) -> bool:
    """Whether ``python``'s packages reach into ``folder`` (an editable install's hook naming it)."""
    site = next(Path(python).parent.parent.glob("lib/python*/site-packages"), None)
    return site is not None and any(str(folder) in hook.read_text(errors="replace")
                                    for hook in site.glob("*.pth"))
