"""A grading worker (``python -m graders.grade.worker``): one JSON job per line in, one result out.

Each job grades one submission with stock nbgrader in a private course directory (a copy of the
lesson's source and of a template gradebook), executing it through :class:`ResilientExecute` in
the sandbox kernel. Nothing of one job is visible to the next.

That gradebook is scratch: the parent copies the scores into the class's gradebook, which alone
must survive a crash. A worker writes its scratch gradebooks without waiting for the disk.
"""

import contextlib
import json
import os
import shutil
import sqlite3
import sys
import time
import traceback
from pathlib import Path

from graders import nbgrader_adapter as adapter
from graders.grade.job import GradingJob
from graders.grade.resilient_execute import INCIDENT
from graders.grade.sandbox import SLOT_ENV
from graders.kernel_startup import KERNEL_ARGUMENTS
from graders.lesson_checks.identity import ROSTER_ENV, SUBMITTER_ENV

# A grading kernel keeps no input history on disk (a sandboxed one has no disk to keep it on).
KERNEL_HISTORY = "--HistoryManager.hist_file=:memory:"


def grading_config(course_dir: Path, job: GradingJob):
    """The course's nbgrader config, executing through the resilient, sandboxed executor; its
    kernels on unix sockets in the job's socket folder, sandboxed or not."""
    c = adapter.config(course_dir, pipeline="resilient")
    c.ResilientExecute.timeout = job.cell_timeout
    c.ResilientExecute.notebook_timeout = job.notebook_timeout
    c.ResilientExecute.socket_root = str(job.socket_dir)
    if job.sandbox != "off":
        c.ResilientExecute.kernel_name = job.kernel_name
    else:
        c.ResilientExecute.extra_arguments = [*KERNEL_ARGUMENTS, KERNEL_HISTORY]
    return c


def _private_course(job: GradingJob) -> Path:
    """A course directory of this job's own: the lesson's source, a blank gradebook, the submission."""
    lesson, sid = job.lesson, job.student_id
    course_dir = job.work_dir / "nbgrader"
    if course_dir.exists():
        shutil.rmtree(course_dir)
    shutil.copytree(job.master / "source" / lesson, course_dir / "source" / lesson)
    shutil.copyfile(job.template_db, course_dir / "gradebook.db")
    submitted = adapter.submission_path(course_dir, "submitted", sid, lesson)
    submitted.parent.mkdir(parents=True)
    shutil.copyfile(job.notebook, submitted)
    return course_dir


def grade(job: GradingJob) -> dict:
    """Autograde one submission and generate its feedback; returns what the parent needs.

    Only a failed autograde fails the job: once the scores are in, a feedback fault comes back
    beside them (:func:`feedback_or_fault`) and costs the student nothing.
    """
    start = time.perf_counter()
    lesson, sid = job.lesson, job.student_id
    course_dir = _private_course(job)
    api = adapter.api(course_dir, c=grading_config(course_dir, job))
    with whose_notebook(job):
        adapter.autograde(api, lesson, sid)
    cells = {name: list(pair) for name, pair in adapter.submission_scores(course_dir, lesson, sid).items()}
    autograded = adapter.submission_path(course_dir, "autograded", sid, lesson)
    incidents = [o["evalue"] for c in json.loads(autograded.read_text())["cells"]
                 for o in c.get("outputs", []) if o.get("ename") == INCIDENT]
    return {"cells": cells, "incidents": sorted(set(incidents)), "autograded": str(autograded),
            **feedback_or_fault(api, lesson, sid), "seconds": time.perf_counter() - start}


@contextlib.contextmanager
def whose_notebook(job: GradingJob):
    """The grading kernel learns whose notebook it runs, and who else is in the class, from the
    environment it inherits (graders/lesson_checks/identity.py): one job at a time per process."""
    names = {SUBMITTER_ENV: job.submitter, ROSTER_ENV: job.roster}
    saved = {name: os.environ.pop(name, None) for name in names}
    os.environ.update({name: json.dumps(value) for name, value in names.items() if value})
    try:
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def feedback_or_fault(api, lesson: str, sid: str) -> dict:
    """``{"feedback": path}``, or ``{"feedback": None, "feedback_fault": {"cause", "error"}}`` when
    generating it failed: the parent records the grade and reports the fault."""
    try:
        return {"feedback": str(adapter.generate_feedback(api, lesson, sid))}
    except Exception as error:  # the scores are already in the gradebook: keep them
        report = fault_report(error)
        return {"feedback": None, "feedback_fault": {"cause": report["cause"], "error": report["error"]}}


RESULT = "@@course-result "


def _reap_children() -> None:
    """Collect exited kernel launchers, so a worker grading hundreds of notebooks leaves no zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def fault_report(error: Exception) -> dict:
    """A grader fault as the parent records it: one line for the CSV, the whole story for logs/."""
    story = traceback.format_exc()
    if isinstance(error, adapter.NbgraderFailed):
        cause = str(error)
        story += f"\nnbgrader's log:\n{error.log}"
    else:
        cause = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}".rstrip(": ")
    return {"ok": False, "cause": cause, "error": story}


def _scratch_gradebooks() -> None:
    """Every SQLite database this process opens, the job's scratch gradebook, skips the disk
    syncs and the journal file of each commit (nbgrader commits dozens of times per job)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _scratch(connection, _record):
        if isinstance(connection, sqlite3.Connection):
            connection.execute("PRAGMA synchronous = OFF")
            connection.execute("PRAGMA journal_mode = MEMORY")


def main() -> int:
    _scratch_gradebooks()
    for line in sys.stdin:
        job = GradingJob.from_json(json.loads(line))
        os.environ["JUPYTER_PATH"] = str(job.jupyter_path)
        os.environ[SLOT_ENV] = str(job.slot)
        try:
            reply = {"job": job.number, "ok": True, **grade(job)}
        except Exception as error:  # reported to the parent, which records the submission as failed
            reply = {"job": job.number, **fault_report(error)}
        _reap_children()
        # Libraries may print too: the parent reads only lines that carry this prefix.
        sys.stdout.write(RESULT + json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
