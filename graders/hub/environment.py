"""The Python every hub user runs: this environment, or, where its interpreter lies in a folder
other users cannot enter (a pyenv or conda Python in root's home, mode 700), the same environment
on a copy of that interpreter they can reach.

Users' servers, kernels and nbgrader commands run as those users; each executable they start must
be reachable by them. When this environment's interpreter is not, :func:`users_bin` builds
``<hub_dir>/python``: the interpreter (its standard library hard-linked, its binary copied and told
to load its own ``libpython`` from beside it), and on it a virtual environment whose packages are
this environment's files, hard-linked (the grader's sandbox finds them under its own prefix), with
``share/`` and ``etc/`` (JupyterLab's application, the extensions' switches) linked to this
environment's, and this environment's scripts pointed at it. Made again at every start, it follows
what is installed here. (The system's Python of the same minor version is no substitute: a
different patch release broke nbconvert's HTML export in the feedback.)
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


def users_bin(hub_dir: Path) -> Path:
    """The folder of the executables (python, jupyterhub-singleuser, nbgrader, course) users run."""
    if reachable_by_everyone(Path(sys.executable)):
        return Path(sys.prefix) / "bin"
    view = Path(hub_dir) / "python"
    if view.exists():
        shutil.rmtree(view)
    interpreter = _copy_interpreter(Path(sys.base_prefix), view / "base")
    return _environment(Path(sys.prefix), view, interpreter)


def _link_tree(source: Path, target: Path) -> None:
    """``target`` a copy of ``source`` whose files are hard links (no space, same permissions)."""
    subprocess.run(["cp", "-a", "--link", str(source), str(target)], check=True)


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
    for alias in ("python3", interpreter.name):
        (view / "bin" / alias).symlink_to("python")
    info = sys.version_info
    (view / "pyvenv.cfg").write_text(f"home = {interpreter.parent}\ninclude-system-site-packages = false\n"
                                     f"version = {info.major}.{info.minor}.{info.micro}\n")
    _link_tree(prefix / "lib", view / "lib")
    for shared in ("share", "etc"):
        if (prefix / shared).exists():
            (view / shared).symlink_to(prefix / shared)
    shebang = f"#!{prefix / 'bin'}/python".encode()
    for script in (prefix / "bin").iterdir():
        if script.is_file() and not script.is_symlink() and script.read_bytes().startswith(shebang):
            _, _, body = script.read_bytes().partition(b"\n")
            target = view / "bin" / script.name
            target.write_bytes(f"#!{view / 'bin' / 'python'}\n".encode() + body)
            target.chmod(0o755)
    for folder in (view, view / "bin"):
        folder.chmod(0o755)
    (view / "pyvenv.cfg").chmod(0o644)
    return view / "bin"
