"""Shared fixtures (a built nbgrader course, the course's wheel, the Spanish edition's language, a
solved edition, a notebook, a grade, a folder built once per run), and the hooks that put the fast
tier's guard (``process_guard.py``) around every test under ``--no-processes`` (``make test-fast``)."""

import contextlib
import gc
import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock
from lesson_files import LESSONS, solved_edition, write
from nbformat.v4 import new_code_cell, new_notebook
from process_guard import ProcessGuard
from student_machine import build_wheel, link_dependencies

from graders.release.editions import build_course

# Every lesson a test runs, in whatever kernel, runs its quick version: grading's own setting, which
# nbgrader's configuration would otherwise set only once some earlier test of this process loaded it.
os.environ.setdefault("COURSE_FAST", "1")


# ------------------------------------------------------------------------------------ fixtures
def built_once(tmp_path_factory, name: str, build) -> Path:
    """The folder ``name``, filled by ``build(folder)`` once per test run: the first xdist worker
    to ask builds it, the others wait for it and read it (a session fixture is one per worker)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session")
def course_dir(tmp_path_factory):
    """An nbgrader course directory built from ``solutions/`` (English source, all lessons), this
    worker's own copy: its tests submit and grade in it."""
    built = built_once(tmp_path_factory, "course", lambda folder: build_course(folder, "en", LESSONS))
    return Path(shutil.copytree(built, tmp_path_factory.mktemp("course") / "course",
                                ignore=shutil.ignore_patterns(".built")))


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The course's wheel, built once per test run."""
    (wheel_file,) = built_once(tmp_path_factory, "wheel", build_wheel).glob("pytorch_course-*.whl")
    return wheel_file


@pytest.fixture(scope="session")
def shared_dependencies(tmp_path_factory):
    """Links to every package of this venv (pip included) except the course and setuptools."""
    return link_dependencies(tmp_path_factory.mktemp("dependencies"))


@pytest.fixture
def english():
    """Checks speak English for the length of a test, whatever the test switches to."""
    import course

    course.set_language("en")
    yield
    course.set_language("en")


@pytest.fixture
def spanish(english):
    """``with spanish():`` the course speaks the Spanish edition's language, then English again."""
    import course

    @contextlib.contextmanager
    def speaking():
        course.set_language("es")
        try:
            yield
        finally:
            course.set_language("en")
    return speaking


@pytest.fixture
def solved():
    """``solved(lesson, language)``: that edition with the reference solutions filled in."""
    return solved_edition


@pytest.fixture
def make_notebook():
    """``make_notebook(*cells)``: a Python 3 notebook of these cells (a string is a code cell)."""
    def make(*cells, **metadata):
        nb = new_notebook(cells=[new_code_cell(c) if isinstance(c, str) else c for c in cells],
                          metadata=metadata)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        return nb
    return make


@pytest.fixture
def grade_cell():
    """``grade_cell(source, cell_id, points=1)``: a locked, graded nbgrader cell."""
    def make(source, cell_id, points=1):
        cell = new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": points,
                                     "grade_id": cell_id}
        return cell
    return make


@pytest.fixture
def grade(course_dir, tmp_path):
    """``grade(lesson, student, nb)``: ``nb`` submitted to the course and autograded by stock
    nbgrader (a kernel runs it); returns the gradebook's :class:`Score`."""
    from graders.notebook_grading.autograde import autograde, submit

    def graded(lesson, student, nb):
        submit(course_dir, lesson, student, write(nb, tmp_path / f"{student}.ipynb"))
        return autograde(course_dir, lesson, student)
    return graded


# ------------------------------------------------------------------------ the fast tier's guard
def pytest_addoption(parser):
    parser.addoption("--no-processes", action="store_true",
                     help="the fast tier: a test that starts a kernel, a subprocess, torchrun or a "
                          "Dask cluster fails, naming the marker it needs")


# xdist hands tests out in collection order: the costliest start first, so that no worker is left
# alone with a long test at the end.
COST_ORDER = ("classroom", "browser", "torchrun", "dask", "kernel", "subprocess")


def _cost_rank(item) -> int:
    return next((rank for rank, name in enumerate(COST_ORDER) if item.get_closest_marker(name)),
                len(COST_ORDER))


def _shares_a_fixture(item) -> bool:
    """Whether the test uses a module-scoped fixture of its own module (a class graded once, a Dask
    cluster): xdist must run those tests on one worker, or each worker would set it up again.
    (A session-scoped fixture, a JupyterLab server or a wheel, is one per worker by design.)"""
    module = item.nodeid.split("::")[0]
    return any(defs[-1].scope == "module" and defs[-1].baseid == module
               for defs in item._fixtureinfo.name2fixturedefs.values())


def _join_group(item, group: str) -> None:
    """``--dist loadgroup`` reads the group from the node id (``id@group``); xdist 3.8 writes it
    where pytest 9.2 no longer reads it, so it is written here too."""
    if not item.get_closest_marker("xdist_group"):
        item.add_marker(pytest.mark.xdist_group(group))
    if getattr(item.config.option, "loadgroup", False) and "@" not in item.nodeid and hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        if marker := item.get_closest_marker("xdist_group"):
            _join_group(item, marker.args[0])
        elif _shares_a_fixture(item):
            _join_group(item, item.nodeid.split("::")[0])
    items.sort(key=_cost_rank)


def pytest_configure(config):
    if config.getoption("no_processes"):
        with contextlib.suppress(ImportError):
            import distributed.deploy.spec  # noqa: F401  (so that its clusters can be refused)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item):
    outcome = yield from _guarded(item)
    if item.get_closest_marker("kernel"):
        finalize_garbage()
    return outcome


def finalize_garbage() -> None:
    """Collect the garbage a test with kernels leaves here, where nothing parses Python: inside a
    later test's `ast.parse`, a dead nbclient task's logged traceback breaks the parse (why: the
    comment in `graders.grade.worker.grade`); it turned a full run red once."""
    gc.collect()


def _guarded(item):
    """Run one phase of ``item`` under the guard when the fast tier asks for it; a refusal fails the
    test even where the code under test caught the exception."""
    if not item.config.getoption("no_processes"):
        return (yield)
    guard = ProcessGuard()
    guard.install()
    try:
        result = yield
    finally:
        guard.uninstall()
    if guard.refused:
        pytest.fail(f"{item.nodeid} {guard.refused[0]}", pytrace=False)
    return result

