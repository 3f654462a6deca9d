"""Grading a whole class (``course grade``): parallel, sandboxed, resumable; no grade is lost.

The parent process finds and checks the submissions, hands them to a pool of worker processes
(each grades one submission at a time in a sandboxed kernel), validates what comes back, and is the
only writer of the class's nbgrader gradebook, its grades CSV and its state file. A state record is
written only once a submission's grades are in the gradebook, so a grader killed half-way resumes
with what is missing, and a submission whose file changed is graded again.
"""

import compileall
import html
import json
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import nbformat

from graders import nbgrader_adapter as adapter
from graders.grade import tampering
from graders.grade.job import GradingJob
from graders.grade.pool import Outcome, WorkerPool
from graders.grade.results import DONE, Row, write_csv
from graders.grade.sandbox import (
    KERNEL_NAME,
    Limits,
    Policy,
    detect_mode,
    socket_root,
    write_kernelspec,
)
from graders.grade.submissions import Submission, find_submissions, validate_notebook
from graders.judge.calls import class_secret
from graders.lessons import BUILD, ROOT
from graders.nbgrader_settings import CELL_TIMEOUT_S, NOTEBOOK_TIMEOUT_S
from graders.release.editions import build_course

# A worker gets this long beyond the notebook's own time limit before it is killed.
WORKER_GRACE_S = 180
# What a student reads when their notebook was graded but its feedback could not be generated.
FEEDBACK_MISSING = ("Tu nota está registrada; el informe detallado no pudo generarse y tu profesor "
                    "ha sido avisado. / Your score is recorded; the detailed feedback could not be "
                    "generated, and your instructor has been told.")


@dataclass
class Options:
    lesson: str
    submissions: Path
    out_dir: Path
    workers: int = os.cpu_count() or 1
    sandbox: str = "auto"  # auto, off
    cell_timeout: int = CELL_TIMEOUT_S
    notebook_timeout: int = NOTEBOOK_TIMEOUT_S
    progress: bool = True
    scheduler: str | None = None  # a Dask scheduler's address: grade on its workers (dask_pool.py)


class Progress:
    """``[k/n] name: score status · failures so far · time left``, one line per graded submission."""

    def __init__(self, to_grade: int, total: int, maximum: float, enabled: bool):
        self.to_grade, self.total, self.maximum, self.enabled = to_grade, total, maximum, enabled
        self.started, self.finished, self.failures = time.monotonic(), 0, 0

    def show(self, row: Row) -> None:
        self.finished += 1
        self.failures += row.status in ("failed", "timeout")
        if self.enabled:
            left = (time.monotonic() - self.started) / self.finished * (self.to_grade - self.finished)
            print(f"[{self.total - self.to_grade + self.finished}/{self.total}] {row.student}: "
                  f"{row.total:g}/{self.maximum:g} {row.status} · {self.failures} failed so far · "
                  f"~{left:.0f} s left", flush=True)


class Classroom:
    """One grading run: its folders, the class's gradebook and state, the submissions to grade."""

    def __init__(self, options: Options):
        self.o = options
        self.out = Path(options.out_dir)
        self.master = self.out / "nbgrader"
        self.scratch = self.out / "scratch"
        self.state_path = self.out / "state.json"
        self.state: dict = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.digests: dict[str, str] = {}
        mode = "none" if options.sandbox == "off" else detect_mode()
        self.policy = Policy(mode, Limits.for_workers(options.workers))
        self.pool: WorkerPool | None = None  # started by prepare(), stopped once grading is done

    # -- preparation ------------------------------------------------------------------------
    def prepare(self) -> list[Submission]:
        """The class's course directory, the sandbox's kernelspec, and every submission found.
        The local workers start first: they load nbgrader while the course is built."""
        for folder in (self.scratch, self.out / "feedback", self.out / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        submissions = find_submissions(self.o.submissions, self.o.lesson, self.scratch)
        self.judge_secret = class_secret(self.out)
        self.roster = tuple(identities(s) for s in submissions)
        if submissions and not self.o.scheduler:
            self.pool = WorkerPool(min(self.o.workers, len(submissions)), self.out / "logs",
                                   self.o.notebook_timeout + WORKER_GRACE_S)
        try:
            build_course(self.master, "en", [self.o.lesson])
            self.template_db = self.scratch / "template.db"
            shutil.copyfile(self.master / "gradebook.db", self.template_db)
            self.grade_cells = adapter.grade_cells(self.master, self.o.lesson)
            if self.policy.mode != "none":
                write_kernelspec(self.scratch / "jupyter" / "kernels", self.policy)
                # A sandboxed kernel cannot write bytecode: what it imports of the course is
                # compiled here, once, rather than by every kernel at its start.
                for package in ("course", "graders"):
                    compileall.compile_dir(ROOT / package, quiet=2)
        except BaseException:
            self.close()
            raise
        return submissions

    def close(self) -> None:
        """Stop the local workers, if they were started and are still running."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def to_grade(self, submissions: list[Submission]) -> list[Submission]:
        """Those not graded yet (or changed since); one that cannot be graded is recorded as such."""
        todo = []
        for submission in submissions:
            digest = self.digests[submission.student_id] = submission.digest()
            done = self.state.get(submission.student_id)
            if done and done["digest"] == digest and done["status"] in DONE:
                continue
            verdict = validate_notebook(submission.path, self.o.lesson, set(self.grade_cells))
            if verdict.status != "ok":
                self.record(submission, self._row(submission, verdict.status, verdict.reason))
                continue
            todo.append(submission)
        return todo

    # -- grading ----------------------------------------------------------------------------
    def grade(self, todo: list[Submission], total: int) -> None:
        """Grade ``todo`` on the worker pool, recording each result as it arrives."""
        if not todo:
            self.close()
            return
        log_dir = self.out / "logs"
        log_dir.mkdir(exist_ok=True)
        sockets = socket_root()
        jobs = [self._job(number, submission, sockets) for number, submission in enumerate(todo)]
        progress = Progress(len(todo), total, sum(self.grade_cells.values()), self.o.progress)
        if self.o.scheduler:
            from graders.grade.dask_pool import DaskPool  # distributed is imported only here

            pool = DaskPool(self.o.scheduler, log_dir, self.o.notebook_timeout + WORKER_GRACE_S,
                            sandbox=self.o.sandbox)
        else:
            pool = self.pool or WorkerPool(min(self.o.workers, len(todo)), log_dir,
                                           self.o.notebook_timeout + WORKER_GRACE_S)
            self.pool = None  # run() stops it
        try:
            for outcome in pool.run(jobs):
                row = self._record_outcome(todo[outcome.job.number], outcome)
                shutil.rmtree(outcome.job.work_dir, ignore_errors=True)
                shutil.rmtree(outcome.job.socket_dir, ignore_errors=True)
                progress.show(row)
        finally:
            shutil.rmtree(sockets, ignore_errors=True)

    def _job(self, number: int, submission: Submission, sockets: Path) -> GradingJob:
        work_dir = self.scratch / "jobs" / submission.student_id
        if work_dir.exists():
            shutil.rmtree(work_dir)
        work_dir.mkdir(parents=True)
        (sockets / str(number)).mkdir()
        return GradingJob(number=number, lesson=self.o.lesson, student_id=submission.student_id,
                          notebook=submission.path.resolve(), master=self.master.resolve(),
                          template_db=self.template_db.resolve(), work_dir=work_dir.resolve(),
                          socket_dir=sockets / str(number), jupyter_path=(self.scratch / "jupyter").resolve(),
                          cell_timeout=self.o.cell_timeout, notebook_timeout=self.o.notebook_timeout,
                          sandbox="off" if self.policy.mode == "none" else "on", kernel_name=KERNEL_NAME,
                          submitter=identities(submission), roster=self.roster,
                          judge_secret=self.judge_secret)

    def _record_outcome(self, submission: Submission, outcome: Outcome) -> Row:
        if outcome.detail:
            self._log_fault(submission, outcome.reason, outcome.detail)
        if outcome.reply is None:
            row = self._row(submission, outcome.status, outcome.reason)
            self.record(submission, row)
            return row
        try:
            _validate_reply(outcome.reply, self.grade_cells)
        except Exception as error:  # one broken submission never stops the class
            row = self._row(submission, "failed", f"grader error: {str(error).strip().splitlines()[-1]}")
            self._log_fault(submission, row.reason, traceback.format_exc())
            self.record(submission, row)
            return row
        incidents = outcome.reply.get("incidents", [])
        cells = {name: [float(score or 0.0), float(maximum)]
                 for name, (score, maximum) in outcome.reply["cells"].items()}
        fault = outcome.reply.get("feedback_fault")
        notes = [*incidents, *([self._feedback_fault(submission, fault)] if fault else [])]
        row = self._row(submission, "partial" if incidents else "graded", "; ".join(notes), cells)
        row.draw = outcome.reply.get("draw", {})
        feedback = outcome.reply.get("feedback")
        page = Path(feedback).read_text() if feedback and Path(feedback).exists() else None
        self.record(submission, row, Path(outcome.reply["autograded"]),
                    page or _notice_html(submission.student, row, FEEDBACK_MISSING))
        return row

    def _feedback_fault(self, submission: Submission, fault: dict) -> str:
        """Log a feedback fault in full; returns the CSV's line: the score stands, what to do."""
        self._log_fault(submission, f"feedback not generated: {fault['cause']}", fault["error"])
        sid = submission.student_id
        return (f"feedback not generated, the score stands: {fault['cause']} (the whole story in "
                f"logs/{sid}.log; once fixed, `nbgrader generate_feedback {self.o.lesson} --student {sid}` "
                "in nbgrader/ writes it)")

    def _log_fault(self, submission: Submission, reason: str, detail: str) -> None:
        """A grader fault's whole story in ``logs/<student_id>.log`` (the CSV has one line)."""
        log = self.out / "logs" / f"{submission.student_id}.log"
        log.parent.mkdir(exist_ok=True)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} {submission.student}: {reason}\n"
                         f"{detail}\n")

    def _row(self, submission: Submission, status: str, reason: str, cells=None) -> Row:
        return Row(submission.student, submission.student_id, self.digests[submission.student_id],
                   status, reason, cells or {})

    # -- results ----------------------------------------------------------------------------
    def record(self, submission: Submission, row: Row, autograded: Path | None = None,
               feedback_html: str | None = None) -> None:
        """Put one result in the gradebook, the class folders and the state file, in that order."""
        lesson, sid = self.o.lesson, submission.student_id
        for kind, source in (("submitted", submission.path), ("autograded", autograded)):
            if source is not None:
                target = adapter.submission_path(self.master, kind, sid, lesson)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
        scores = {name: row.cells.get(name, (0.0, maximum))[0]
                  for name, maximum in self.grade_cells.items()}
        with adapter.gradebook(self.master) as gradebook, adapter.quiet_nbgrader():
            # nbgrader's CSV export does not quote fields: a comma in a name would shift columns
            gradebook.update_or_create_student(sid, first_name=submission.student.replace(",", " "))
            notebook = gradebook.update_or_create_submission(lesson, sid).notebooks[0]
            for grade in notebook.grades:
                grade.auto_score = scores.get(grade.name, 0.0)
                grade.needs_manual_grade = False
            gradebook.db.commit()
        row.cells = {name: [scores[name], maximum] for name, maximum in self.grade_cells.items()}
        page = feedback_html or _notice_html(submission.student, row)
        (self.out / "feedback" / f"{sid}.html").write_text(page)
        self.state[sid] = {"student": row.student, "digest": row.digest, "status": row.status,
                           "reason": row.reason, "cells": row.cells, "draw": row.draw}
        partial = self.state_path.with_suffix(".partial")
        partial.write_text(json.dumps(self.state, indent=1, ensure_ascii=False))
        partial.replace(self.state_path)

    def rows(self, submissions) -> list[Row]:
        """The recorded row of every submission that has one, in the submissions' order."""
        return [Row(**{key: self.state[s.student_id][key] for key in ("student", "digest", "status",
                                                                       "reason", "cells")},
                    student_id=s.student_id, draw=self.state[s.student_id].get("draw", {}))
                for s in submissions if s.student_id in self.state]


def identities(submission: Submission) -> tuple[str, ...]:
    """The names a student may write in ``STUDENT_ID``: as submitted, and the platform's id."""
    return (submission.student, *([submission.platform_id] if submission.platform_id else []))


def _notice_html(student: str, row: Row, reason: str | None = None) -> str:
    """Feedback for a submission that could not run, or whose feedback could not be generated:
    the recorded score and the reason (``row.reason`` unless given), in both languages. The name
    and the reason come from the student's file: escaped, they are text in any browser."""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Feedback</title></head><body>"
            f"<h1>{html.escape(student)}</h1><p><b>{row.total:g} / "
            f"{sum(m for _, m in row.cells.values()):g}</b> ({html.escape(row.status)})</p>"
            f"<p>Motivo / reason: {html.escape(reason or row.reason)}</p></body></html>")


DRAW_TEXT = ("identity", "status", "named")


def _validate_reply(reply: dict, grade_cells: dict) -> None:
    """What comes back from a worker is data: check its shape before it touches the gradebook."""
    cells = reply.get("cells")
    if not isinstance(cells, dict) or set(cells) != set(grade_cells):
        raise ValueError(f"worker returned grade cells {sorted(cells or [])}, expected {sorted(grade_cells)}")
    for name, pair in cells.items():
        score, maximum = pair
        if float(maximum) != float(grade_cells[name]) or not 0 <= float(score or 0) <= float(maximum):
            raise ValueError(f"worker returned {score}/{maximum} for {name}")
    draw = reply.get("draw", {})
    if not (isinstance(draw, dict) and all(isinstance(draw.get(key, ""), str) for key in DRAW_TEXT)
            and isinstance(draw.get("questions", []), list)
            and all(isinstance(qid, str) for qid in draw.get("questions", []))):
        raise ValueError("worker returned a malformed draw")
    fault = reply.get("feedback_fault")
    if fault is not None and not (isinstance(fault, dict) and isinstance(fault.get("cause"), str)
                                  and isinstance(fault.get("error"), str)):
        raise ValueError("worker returned a malformed feedback fault")
    nbformat.validate(nbformat.read(reply["autograded"], 4))


def grade_class(options: Options) -> tuple[list[Row], Path]:
    """Grade every submission not graded yet; returns all rows and the grades CSV's path."""
    room = Classroom(options)
    submissions = room.prepare()
    try:
        room.grade(room.to_grade(submissions), len(submissions))
    finally:
        room.close()
    rows = room.rows(submissions)
    platforms = {s.student_id: s for s in submissions}
    released = room.master / "release" / options.lesson / f"{options.lesson}.ipynb"
    for row in rows:
        submission = platforms[row.student_id]
        row.platform_id, row.platform = submission.platform_id, submission.platform
        if row.status not in ("invalid", "wrong_lesson"):
            row.tampering = tampering.findings(submission.path, released)
    return rows, write_csv(rows, room.grade_cells, room.out / "grades.csv")


def default_out_dir(lesson: str) -> Path:
    return BUILD / "grading" / lesson
