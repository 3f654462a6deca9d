"""Where the course drives nbgrader: its API, its pipelines, its gradebook and its cell metadata.

Release, the course run, ``make check`` and the class grader all run nbgrader through these
functions, so a change in how the course drives it is made once. The modules that extend nbgrader
(a preprocessor, an exporter or a plugin subclassing nbgrader's: ``notebook_grading/sanitize.py``
and ``redacted_feedback.py``, ``grade/resilient_execute.py``, ``grade/item_analysis.py``,
``selfcheck.py``, ``hub/nbgrader_roles.py``) import the classes they extend themselves.
"""

import functools
import re
import warnings
from contextlib import contextmanager
from pathlib import Path

import nbgrader.api
from nbgrader.api import Gradebook

from graders.nbgrader_settings import SANITIZE, apply

# nbgrader 0.9's own autograde steps, spelled out so that one of them can be swapped or dropped.
EXECUTE = "nbgrader.preprocessors.Execute"
AUTOGRADE_STEPS = (
    EXECUTE,
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
)
RESILIENT_EXECUTE = "graders.grade.resilient_execute.ResilientExecute"


def _stock(c) -> None:
    """The course's settings as they are: nbgrader executes the notebook with its own Execute."""


def _already_executed(c) -> None:
    """Grade what papermill executed: no output clearing, no second run."""
    c.Autograde.sanitize_preprocessors = [s for s in SANITIZE if not s.endswith(".ClearOutput")]
    c.Autograde.autograde_preprocessors = [s for s in AUTOGRADE_STEPS if s != EXECUTE]


def _resilient(c) -> None:
    """Execute through the class grader's executor, which survives what student code does."""
    c.Autograde.autograde_preprocessors = [RESILIENT_EXECUTE if s == EXECUTE else s
                                           for s in AUTOGRADE_STEPS]


PIPELINES = {"stock": _stock, "already_executed": _already_executed, "resilient": _resilient}


class NbgraderFailed(RuntimeError):
    """An nbgrader step that reported failure; ``cause`` is the one line that names why."""

    def __init__(self, step: str, what: str, result: dict):
        self.log = result.get("log", "") or ""
        self.cause = last_error_line(f"{self.log}\n{result.get('error') or ''}")
        super().__init__(f"nbgrader {step} failed for {what}: {self.cause}")


def last_error_line(log: str) -> str:
    """The last ``SomethingError: message`` line of an nbgrader log, the one that names the cause.

    nbgrader ends every failure with "Please see the above traceback": that line names nothing.
    """
    errors = [line for line in re.findall(r"^\s*((?:\w+\.)*\w+(?:Error|Exception|Exit)\b.*)$", log,
                                          flags=re.MULTILINE) if "Please see the" not in line]
    return errors[-1] if errors else (log.strip().splitlines() or ["(no log)"])[-1]


def config(course_dir: Path, language: str = "en", pipeline: str = "stock"):
    """A traitlets config with the course's nbgrader settings and the named autograde pipeline."""
    from traitlets.config import Config

    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}; use one of {sorted(PIPELINES)}")
    c = Config()
    apply(c, language=language, root=Path(course_dir))
    PIPELINES[pipeline](c)
    return c


def api(course_dir: Path, language: str = "en", pipeline: str = "stock", c=None):
    """nbgrader's own ``NbGraderAPI`` on ``course_dir``, configured like ``nbgrader_config.py``."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    # nbgrader starts an `alembic heads` process (3 s of CPU, and `alembic` must be on PATH) for
    # every gradebook it creates, to record the schema's version: the same answer, read here once.
    nbgrader.api.get_alembic_version = gradebook_schema_version
    c = c if c is not None else config(course_dir, language, pipeline)
    return NbGraderAPI(coursedir=CourseDirectory(config=c), config=c)


@functools.cache
def gradebook_schema_version() -> str:
    """The alembic head of nbgrader's gradebook schema, read from nbgrader's own migrations."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    alembic = Config()
    alembic.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(alembic).get_current_head()


def _succeeded(step: str, what: str, result: dict) -> dict:
    if not result["success"]:
        raise NbgraderFailed(step, what, result)
    return result


def generate_assignment(nbgrader_api, lesson: str) -> None:
    """``source/<lesson>`` → ``release/<lesson>`` and the gradebook's record of its cells."""
    _succeeded("generate_assignment", lesson,
               nbgrader_api.generate_assignment(lesson, force=True, create=True))


@contextmanager
def quiet_nbgrader():
    """nbgrader's own SQLAlchemy session warnings (an object "not in session") say nothing to a
    course user: silenced inside the block, and only those nbgrader raises."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="nbgrader")
        yield


def autograde(nbgrader_api, lesson: str, student: str) -> None:
    """Autograde ``submitted/<student>/<lesson>`` into ``autograded/`` and the gradebook."""
    with quiet_nbgrader():
        result = nbgrader_api.autograde(lesson, student, force=True, create=True)
    _succeeded("autograde", f"{student}/{lesson}", result)


def generate_feedback(nbgrader_api, lesson: str, student: str) -> Path:
    """nbgrader's HTML feedback for one graded submission; returns its path."""
    _succeeded("generate_feedback", f"{student}/{lesson}",
               nbgrader_api.generate_feedback(lesson, student, force=True))
    return Path(nbgrader_api.coursedir.root) / "feedback" / student / lesson / f"{lesson}.html"


def submission_path(course_dir: Path, kind: str, student: str, lesson: str) -> Path:
    """Where nbgrader keeps a student's notebook of ``kind`` (``submitted``, ``autograded``…)."""
    return Path(course_dir) / kind / student / lesson / f"{lesson}.ipynb"


@contextmanager
def gradebook(course_dir: Path):
    """The course directory's ``gradebook.db``, opened with nbgrader's own ``Gradebook``."""
    with Gradebook(f"sqlite:///{(Path(course_dir) / 'gradebook.db').resolve()}") as book:
        yield book


def grade_cells(course_dir: Path, lesson: str) -> dict:
    """``grade_id`` → maximum points of every grade cell of a lesson (one notebook per lesson)."""
    with gradebook(course_dir) as book:
        return {c.name: c.max_score for c in book.find_notebook(lesson, lesson).grade_cells}


def submission_scores(course_dir: Path, lesson: str, student: str) -> dict:
    """``grade_id`` → (score, max_score) of one graded submission."""
    with gradebook(course_dir) as book:
        notebook = book.find_submission_notebook(lesson, lesson, student)
        return {g.name: (g.score, g.max_score) for g in notebook.grades}


def set_auto_score(course_dir: Path, lesson: str, student: str, grade_id: str, score: float) -> None:
    """Record the score the judge decided for one grade cell of a graded submission."""
    with gradebook(course_dir) as book:
        book.find_grade(grade_id, lesson, lesson, student).auto_score = score
        book.db.commit()


def cell_meta(cell) -> dict:
    """A cell's nbgrader metadata, ``{}`` for a cell nbgrader does not know."""
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def grade_id(cell) -> str | None:
    return cell_meta(cell).get("grade_id")


def is_solution_cell(cell) -> bool:
    return bool(cell_meta(cell).get("solution"))


def is_grade_cell(cell) -> bool:
    return bool(cell_meta(cell).get("grade"))
