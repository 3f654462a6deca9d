"""A grading worker (``python -m graders.grade.worker``): one JSON job per line in, one result out.

Each job grades one submission with stock nbgrader in a private course directory (a copy of the
lesson's source and of a template gradebook), executing it through :class:`ResilientExecute` in
the sandbox kernel. Nothing of one job is visible to the next.

That gradebook is scratch: the parent copies the scores into the class's gradebook, which alone
must survive a crash. A worker writes its scratch gradebooks without waiting for the disk.
"""

import gc
import json
import os
import shutil
import sqlite3
import stat
import sys
import time
import traceback
from pathlib import Path

import nbformat
from nbformat.v4 import new_output

from graders import nbgrader_adapter as adapter
from graders.grade.job import GradingJob
from graders.grade.resilient_execute import INCIDENT
from graders.grade.sandbox import SLOT_ENV
from graders.judge import calls, concepts, wire
from graders.kernel_startup import KERNEL_ARGUMENTS
from graders.release.editions import edition_language

# A grading kernel keeps no input history on disk (a sandboxed one has no disk to keep it on).
KERNEL_HISTORY = "--HistoryManager.hist_file=:memory:"


def grading_config(course_dir: Path, job: GradingJob):
    """The course's nbgrader config, executing through the resilient, sandboxed executor; its
    kernels on unix sockets in the job's socket folder, sandboxed or not."""
    c = adapter.config(course_dir, pipeline="resilient")
    c.ResilientExecute.timeout = job.cell_timeout
    c.ResilientExecute.notebook_timeout = job.notebook_timeout
    c.ResilientExecute.socket_root = str(job.socket_dir)
    c.ResilientExecute.judge_file = str(job.work_dir / JUDGE_FILE)
    c.ResilientExecute.judge_names = concepts.NAMES
    c.ResilientExecute.judge_calls = json.dumps(calls.probe_calls(job.lesson, job.judge_secret))
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
    adapter.autograde(api, lesson, sid)
    # nbclient's kernel poller can die with an exception nobody retrieves; collected inside the
    # judge's ast.parse, its logged traceback (which parses source on Python 3.11) would break that
    # parse with a SystemError (CPython gh-106905). Collected here, nothing is parsing.
    gc.collect()
    judged = judge(course_dir, job)
    cells = {name: list(pair) for name, pair in adapter.submission_scores(course_dir, lesson, sid).items()}
    autograded = adapter.submission_path(course_dir, "autograded", sid, lesson)
    incidents = [o["evalue"] for c in json.loads(autograded.read_text())["cells"]
                 for o in c.get("outputs", []) if o.get("ename") == INCIDENT]
    return {"cells": cells, "incidents": sorted(set(incidents)), "autograded": str(autograded), **judged,
            **feedback_or_fault(api, lesson, sid), "seconds": time.perf_counter() - start}


JUDGE_FILE = "judge.json"


def judge(course_dir: Path, job: GradingJob) -> dict:
    """The judge's verdicts, put in the scratch gradebook and in the autograded notebook (the
    feedback shows them) before the scores are read; ``{"draw": ...}`` for the CSV. Who submitted and
    who is in the class come from the job, never from the kernel."""
    lesson, sid = job.lesson, job.student_id
    source = course_dir / "source" / lesson / f"{lesson}.ipynb"
    values, returned, why = _judge_data(job.work_dir / JUDGE_FILE)
    autograded = adapter.submission_path(course_dir, "autograded", sid, lesson)
    nb = nbformat.read(autograded, 4)
    language = edition_language(nb) if edition_language(nb) in concepts.WORDS else "en"
    points = adapter.grade_cells(course_dir, lesson)
    kernel = {cell: score or 0.0 for cell, (score, _) in
              adapter.submission_scores(course_dir, lesson, sid).items()}
    judged = calls.cell_scores(lesson, job.judge_secret, source, returned, points)
    words = calls.WORDS[language]
    told = {cell: [words["differs" if cell in returned else "no_data"].format(why=why)]
            for cell, score in judged.items() if score < kernel[cell]}
    scores = {cell: min(score, kernel[cell]) for cell, score in judged.items()}
    decided = {}
    concept = concepts.concept_cell(nbformat.read(source, 4).cells)
    if concept is not None:
        verdict = concepts.verdict(concept, values, why, list(job.submitter), [list(s) for s in job.roster],
                                   points[concept.grade_id], language)
        scores[concept.grade_id], decided = verdict.score, {"draw": verdict.draw}
    for cell, score in scores.items():
        adapter.set_auto_score(course_dir, lesson, sid, cell, score)
    for graded in nb.cells:
        if concept is not None and adapter.grade_id(graded) == concept.grade_id:
            graded.outputs = [_said(verdict.lines)]
        elif adapter.grade_id(graded) in told:
            graded.outputs.append(_said(told[adapter.grade_id(graded)]))
    mode = autograded.stat().st_mode  # nbgrader leaves it read-only, which binds all but root
    autograded.chmod(mode | stat.S_IWUSR)
    nbformat.write(nb, autograded)
    autograded.chmod(mode)
    return decided


def _said(lines: list[str]):
    return new_output("stream", name="stdout", text="\n".join(lines) + "\n")


def _judge_data(path: Path) -> tuple[dict | None, dict, str]:
    """The kernel's values (``None`` when they never came or were not plain data) and each call's
    results that came back as plain data, decoded; and what went wrong."""
    if not path.exists():
        return None, {}, "the notebook did not run to its end"
    sent = json.loads(path.read_text())
    why, values, returned = [sent["why"]] if sent["why"] else [], None, {}
    if sent["values"] is not None:
        try:
            values = wire.decode_reply(json.dumps({"values": sent["values"], "calls": {}}))[0]
        except wire.Malformed as error:
            why.append(str(error))
    for cell, results in sent["calls"].items():
        try:
            returned |= wire.decode_reply(json.dumps({"values": {}, "calls": {cell: results}}))[1]
        except wire.Malformed as error:
            why.append(f"{cell}: {error}")
    return values, returned, "; ".join(why) or "no answer"


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
