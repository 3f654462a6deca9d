"""Grading a whole class (``course grade``): parallel, sandboxed, resumable; no grade is lost.

The parent process finds and checks the submissions, hands them to worker processes (each grades
one submission at a time in a sandboxed kernel), validates what comes back, and is the only writer
of the class's nbgrader gradebook, its grades CSV and its state file. A state record is written
only once a submission's grades are in the gradebook, so a grader killed half-way resumes with
what is missing, and a submission whose file changed is graded again.
"""

import csv
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from graders.editions import build_course
from graders.lessons import BUILD, ROOT
from graders.sandbox import KERNEL_NAME, Limits, Policy, detect_mode, write_kernelspec
from graders.submissions import Submission, check_notebook, find_submissions
from graders.worker import RESULT

# A "failed" submission (the grader itself broke) is tried again on the next run.
DONE = ("graded", "partial", "invalid", "wrong_lesson", "timeout")
STATUSES = (*DONE, "failed")
CSV_FIXED = ("student", "student_id")
CSV_TAIL = ("total", "max", "status", "reason")


@dataclass
class Options:
    lesson: str
    submissions: Path
    out_dir: Path
    workers: int = os.cpu_count() or 1
    sandbox: str = "auto"  # auto, off
    cell_timeout: int = 120
    notebook_timeout: int = 900
    progress: bool = True


@dataclass
class Row:
    student: str
    student_id: str
    digest: str
    status: str
    reason: str = ""
    cells: dict = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(score for score, _ in self.cells.values())


class Worker:
    """One ``python -m graders.worker`` process, its own session so it can be killed whole."""

    def __init__(self, number: int, log_dir: Path):
        self.log = open(log_dir / f"worker-{number}.log", "ab")  # closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "graders.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, start_new_session=True, cwd=ROOT, text=True, bufsize=1)
        self.job = None
        self.deadline = 0.0

    def send(self, job: dict, timeout: float) -> None:
        self.job = job
        self.deadline = time.monotonic() + timeout
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.log.close()


class Classroom:
    """State shared by one grading run: paths, gradebook, rows already done."""

    def __init__(self, options: Options):
        self.o = options
        self.out = Path(options.out_dir)
        self.master = self.out / "course"
        self.scratch = self.out / "scratch"
        self.state_path = self.out / "state.json"
        self.state: dict = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        mode = "none" if options.sandbox == "off" else detect_mode()
        self.policy = Policy(mode, Limits.for_workers(options.workers))

    # -- preparation ------------------------------------------------------------------------
    def prepare(self) -> list[Submission]:
        for folder in (self.scratch, self.out / "feedback"):
            folder.mkdir(parents=True, exist_ok=True)
        build_course(self.master, "en", [self.o.lesson])
        self.template_db = self.scratch / "template.db"
        shutil.copyfile(self.master / "gradebook.db", self.template_db)
        with Gradebook(self._db_url()) as gradebook:
            notebook = gradebook.find_notebook(self.o.lesson, self.o.lesson)
            self.grade_cells = {c.name: c.max_score for c in notebook.grade_cells}
        if self.policy.mode != "none":
            write_kernelspec(self.scratch / "jupyter" / "kernels", self.policy)
        return find_submissions(self.o.submissions, self.o.lesson, self.scratch)

    def _db_url(self) -> str:
        return f"sqlite:///{(self.master / 'gradebook.db').resolve()}"

    # -- results ----------------------------------------------------------------------------
    def record(self, submission: Submission, row: Row, autograded: Path | None = None,
               feedback_html: str | None = None) -> None:
        """Put one result in the gradebook, the class folders and the state file, in that order."""
        lesson, sid = self.o.lesson, submission.student_id
        for kind, source in (("submitted", submission.path), ("autograded", autograded)):
            if source is not None:
                target = self.master / kind / sid / lesson / f"{lesson}.ipynb"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
        scores = {name: row.cells.get(name, (0.0, maximum))[0]
                  for name, maximum in self.grade_cells.items()}
        with Gradebook(self._db_url()) as gradebook:
            # nbgrader's CSV export does not quote fields: a comma in a name would shift columns
            gradebook.update_or_create_student(sid, first_name=submission.student.replace(",", " "))
            notebook = gradebook.update_or_create_submission(lesson, sid).notebooks[0]
            for grade in notebook.grades:
                grade.auto_score = scores.get(grade.name, 0.0)
                grade.needs_manual_grade = False
            gradebook.db.commit()
        row.cells = {name: [scores[name], maximum] for name, maximum in self.grade_cells.items()}
        html = self.out / "feedback" / f"{sid}.html"
        html.write_text(feedback_html or _notice_html(submission.student, row))
        self.state[sid] = {"student": row.student, "digest": row.digest, "status": row.status,
                           "reason": row.reason, "cells": row.cells}
        partial = self.state_path.with_suffix(".partial")
        partial.write_text(json.dumps(self.state, indent=1, ensure_ascii=False))
        partial.replace(self.state_path)

    def rows(self, submissions) -> list[Row]:
        return [Row(self.state[s.student_id]["student"], s.student_id, self.state[s.student_id]["digest"],
                    self.state[s.student_id]["status"], self.state[s.student_id]["reason"],
                    self.state[s.student_id]["cells"]) for s in submissions if s.student_id in self.state]


def _notice_html(student: str, row: Row) -> str:
    """Feedback for a submission that could not run: the reason, in both languages."""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Feedback</title></head><body>"
            f"<h1>{student}</h1><p><b>0 / {sum(m for _, m in row.cells.values()):g}</b> "
            f"({row.status})</p><p>Motivo / reason: {row.reason}</p></body></html>")


def _result_row(submission: Submission, digest: str, reply: dict) -> Row:
    cells = {name: [float(score or 0.0), float(maximum)] for name, (score, maximum) in reply["cells"].items()}
    incidents = reply.get("incidents", [])
    return Row(submission.student, submission.student_id, digest,
               "partial" if incidents else "graded", "; ".join(incidents), cells)


def _validate_reply(reply: dict, grade_cells: dict) -> None:
    """What comes back from a worker is data: check its shape before it touches the gradebook."""
    cells = reply.get("cells")
    if not isinstance(cells, dict) or set(cells) != set(grade_cells):
        raise ValueError(f"worker returned grade cells {sorted(cells or [])}, expected {sorted(grade_cells)}")
    for name, pair in cells.items():
        score, maximum = pair
        if float(maximum) != float(grade_cells[name]) or not 0 <= float(score or 0) <= float(maximum):
            raise ValueError(f"worker returned {score}/{maximum} for {name}")
    nbformat.validate(nbformat.read(reply["autograded"], 4))


def grade_class(options: Options) -> tuple[list[Row], Path]:
    """Grade every submission not graded yet; returns all rows and the grades CSV's path."""
    room = Classroom(options)
    submissions = room.prepare()
    todo, digests = [], {}
    for submission in submissions:
        digest = submission.digest()
        digests[submission.student_id] = digest
        done = room.state.get(submission.student_id)
        if done and done["digest"] == digest and done["status"] in DONE:
            continue
        verdict = check_notebook(submission.path, options.lesson, set(room.grade_cells))
        if verdict.status != "ok":
            room.record(submission, Row(submission.student, submission.student_id, digest,
                                        verdict.status, verdict.reason))
            continue
        todo.append(submission)

    _run_workers(room, todo, digests, len(submissions))
    rows = room.rows(submissions)
    csv_path = write_csv(rows, room.grade_cells, room.out / "grades.csv")
    return rows, csv_path


def _job(room: Classroom, number: int, submission: Submission, sockets: Path) -> dict:
    work_dir = room.scratch / "jobs" / submission.student_id
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    (sockets / str(number)).mkdir()
    return {"job": number, "lesson": room.o.lesson, "student_id": submission.student_id,
            "notebook": str(submission.path.resolve()), "master": str(room.master.resolve()),
            "template_db": str(room.template_db.resolve()), "work_dir": str(work_dir.resolve()),
            "socket_dir": str(sockets / str(number)),
            "cell_timeout": room.o.cell_timeout, "notebook_timeout": room.o.notebook_timeout,
            "sandbox": "off" if room.policy.mode == "none" else "on", "kernel_name": KERNEL_NAME,
            "jupyter_path": str((room.scratch / "jupyter").resolve())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _socket_root() -> Path:
    """A short folder for kernel sockets (unix socket paths stay under ~100 bytes, whatever the
    class folder and student names); what killed grading runs left there is removed first."""
    for stale in Path(tempfile.gettempdir()).glob("course-grader-*-*"):
        pid = stale.name.split("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"course-grader-{os.getpid()}-"))


def _run_workers(room: Classroom, todo: list[Submission], digests: dict, total: int) -> None:
    """Hand out submissions to ``workers`` processes; a stuck worker is killed and replaced."""
    if not todo:
        return
    log_dir = room.out / "logs"
    log_dir.mkdir(exist_ok=True)
    sockets = _socket_root()
    spawned = 0

    def spawn() -> Worker:
        nonlocal spawned
        spawned += 1
        worker = Worker(spawned, log_dir)
        selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        return worker

    def retire(worker: Worker) -> Worker:
        selector.unregister(worker.process.stdout)
        worker.stop()
        return spawn()

    selector = selectors.DefaultSelector()
    workers = [spawn() for _ in range(max(1, min(room.o.workers, len(todo))))]
    queue = list(enumerate(todo))
    by_job = dict(queue)
    hard_limit = room.o.notebook_timeout + 180
    started, finished, failures = time.monotonic(), 0, 0

    def finish(job: dict, status: str = "", reason: str = "", reply: dict | None = None) -> None:
        nonlocal finished, failures
        submission = by_job[job["job"]]
        digest = digests[submission.student_id]
        if reply is not None:
            row = _result_row(submission, digest, reply)
            feedback = Path(reply["feedback"])
            room.record(submission, row, Path(reply["autograded"]),
                        feedback.read_text() if feedback.exists() else None)
        else:
            row = Row(submission.student, submission.student_id, digest, status, reason)
            room.record(submission, row)
        shutil.rmtree(job["work_dir"], ignore_errors=True)
        shutil.rmtree(job["socket_dir"], ignore_errors=True)
        finished += 1
        failures += row.status in ("failed", "timeout")
        if room.o.progress:
            left = (time.monotonic() - started) / finished * (len(todo) - finished)
            print(f"[{total - len(todo) + finished}/{total}] {row.student}: {row.total:g}/"
                  f"{sum(room.grade_cells.values()):g} {row.status} · {failures} failed so far · "
                  f"~{left:.0f} s left", flush=True)

    def receive(worker: Worker) -> None:
        line = worker.process.stdout.readline()
        if not line:  # the worker died under its submission
            job, worker.job = worker.job, None
            finish(job, "failed", "grader error: the grading worker died")
            return
        if not line.startswith(RESULT):
            return
        reply = json.loads(line[len(RESULT):])
        job, worker.job = worker.job, None
        try:
            if not reply["ok"]:
                raise RuntimeError(reply["error"])
            _validate_reply(reply, room.grade_cells)
        except Exception as error:  # one broken submission never stops the class
            finish(job, "failed", f"grader error: {str(error).strip().splitlines()[-1]}")
            return
        finish(job, reply=reply)

    try:
        while queue or any(w.job for w in workers):
            for worker in workers:
                if worker.job is None and queue:
                    number, submission = queue.pop(0)
                    worker.send(_job(room, number, submission, sockets), hard_limit)
            for key, _ in selector.select(timeout=1.0):
                receive(key.data)
            for index, worker in enumerate(workers):
                if worker.process.poll() is not None and worker.job is None:
                    workers[index] = retire(worker)
                elif worker.job and time.monotonic() > worker.deadline:
                    job, worker.job = worker.job, None
                    workers[index] = retire(worker)
                    finish(job, "timeout", f"grading took more than {hard_limit} s and was stopped")
    finally:
        for worker in workers:
            worker.stop()
        shutil.rmtree(sockets, ignore_errors=True)


def write_csv(rows: list[Row], grade_cells: dict, path: Path) -> Path:
    """student, student_id, one column per exercise, total, max, status, reason."""
    names = list(grade_cells)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CSV_FIXED, *names, *CSV_TAIL])
        for row in rows:
            writer.writerow([row.student, row.student_id,
                             *(f"{row.cells.get(n, [0.0])[0]:g}" for n in names),
                             f"{row.total:g}", f"{sum(grade_cells.values()):g}", row.status, row.reason])
    return path


def summary(rows: list[Row], grade_cells: dict, out_dir: Path) -> tuple[str, Path]:
    """A table of counts and scores, and the score distribution drawn into ``scores.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maximum = sum(grade_cells.values())
    totals = sorted(row.total for row in rows)
    by_status = {s: sum(r.status == s for r in rows) for s in STATUSES if any(r.status == s for r in rows)}
    mean = sum(totals) / len(totals) if totals else 0.0
    median = totals[len(totals) // 2] if totals else 0.0
    lines = ["| submissions | mean | median | min | max | " + " | ".join(by_status) + " |",
             "|---:|---:|---:|---:|---:|" + "---:|" * len(by_status),
             f"| {len(rows)} | {mean:.2f} / {maximum:g} | {median:g} | {totals[0] if totals else 0:g} | "
             f"{totals[-1] if totals else 0:g} | " + " | ".join(str(v) for v in by_status.values()) + " |"]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(totals, bins=[x - 0.5 for x in range(int(maximum) + 2)], color="tab:blue", edgecolor="white")
    ax.set_xlabel(f"score (max {maximum:g})")
    ax.set_ylabel("students")
    ax.set_title("Score distribution")
    fig.tight_layout()
    picture = out_dir / "scores.png"
    fig.savefig(picture, dpi=100)
    plt.close(fig)
    return "\n".join(lines), picture


def default_out_dir(lesson: str) -> Path:
    return BUILD / "grading" / lesson
