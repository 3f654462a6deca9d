"""The one nbgrader adapter: pipelines by name, failures that name their cause, cell metadata."""

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell
from nbgrader.dbutil import _temp_alembic_ini

from graders import nbgrader_adapter as adapter

NBGRADER_LOG = """[ERROR] Traceback (most recent call last):
    File "x.py", line 1, in run
  zmq.error.ZMQError: File name too long
[ERROR] There was an error processing assignment 'a' for student 'b'
nbgrader.converters.base.NbGraderException: Please see the the above traceback for details.
"""


def test_a_failure_names_the_real_cause_not_nbgraders_closing_line():
    failure = adapter.NbgraderFailed("autograde", "b/a", {"success": False, "log": NBGRADER_LOG})
    assert failure.cause == "zmq.error.ZMQError: File name too long"
    assert str(failure) == "nbgrader autograde failed for b/a: zmq.error.ZMQError: File name too long"
    assert failure.log == NBGRADER_LOG


def test_a_log_without_an_error_line_gives_its_last_line():
    assert adapter.last_error_line("starting\nsomething odd happened\n") == "something odd happened"
    assert adapter.last_error_line("") == "(no log)"


def test_pipelines_swap_or_drop_only_the_execute_step(tmp_path):
    stock = adapter.config(tmp_path, pipeline="stock")
    assert "autograde_preprocessors" not in stock.Autograde  # nbgrader's own default stands
    executed = adapter.config(tmp_path, pipeline="already_executed").Autograde
    assert executed.autograde_preprocessors == list(adapter.AUTOGRADE_STEPS[1:])
    assert not any(step.endswith(".ClearOutput") for step in executed.sanitize_preprocessors)
    resilient = adapter.config(tmp_path, pipeline="resilient").Autograde.autograde_preprocessors
    assert resilient[0] == adapter.RESILIENT_EXECUTE and resilient[1:] == list(adapter.AUTOGRADE_STEPS[1:])


def test_an_unknown_pipeline_is_refused_with_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown pipeline 'fast'; use one of"):
        adapter.config(tmp_path, pipeline="fast")


def test_the_stock_steps_are_nbgraders_own():
    from nbgrader.converters import Autograde

    default = [f"{step.__module__.split('.')[0]}.preprocessors.{step.__name__}"
               for step in Autograde().autograde_preprocessors]
    assert default == list(adapter.AUTOGRADE_STEPS)


def test_cell_metadata_helpers():
    answer = new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": "ex1", "solution": True,
                                                           "grade": False}})
    check = new_code_cell("assert x", metadata={"nbgrader": {"grade_id": "t1", "grade": True}})
    plain = new_code_cell("print(1)")
    assert [adapter.grade_id(c) for c in (answer, check, plain)] == ["ex1", "t1", None]
    assert [adapter.is_solution_cell(c) for c in (answer, check, plain)] == [True, False, False]
    assert [adapter.is_grade_cell(c) for c in (answer, check, plain)] == [False, True, False]


@pytest.mark.subprocess
def test_the_gradebook_schema_version_is_what_alembic_itself_answers():
    """The version nbgrader would ask a new `alembic heads` process for, as nbgrader asks it."""
    with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as alembic_ini:
        heads = subprocess.run([Path(sys.executable).parent / "alembic", "-c", alembic_ini, "heads"],
                               capture_output=True, text=True, check=True).stdout
    assert heads.split()[:2] == [adapter.gradebook_schema_version(), "(head)"]


def test_a_new_gradebook_records_the_schema_version_without_alembic_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    adapter.api(tmp_path)
    with adapter.Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}"):
        pass
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        (version,) = db.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version == adapter.gradebook_schema_version()
