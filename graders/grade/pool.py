"""A pool of grading worker processes: one job each at a time; a dead or stuck worker is replaced.

The pool knows nothing of gradebooks: it hands out jobs (:class:`GradingJob`), and for each job
yields one :class:`Outcome`, either the worker's reply or the reason there is none.
"""

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from graders.grade.job import GradingJob
from graders.grade.sandbox import LOCAL_SLOTS, claim_slot
from graders.grade.worker import RESULT
from graders.lessons import ROOT


@dataclass
class Outcome:
    """What became of one job: the worker's ``reply``, or a ``status`` and one-line ``reason``
    without one (and, for a grader fault, the whole story in ``detail``)."""

    job: GradingJob
    reply: dict | None = None
    status: str = ""
    reason: str = ""
    detail: str = ""


def kill_session(process: subprocess.Popen) -> None:
    """SIGKILL to ``process``'s whole session: a grading worker and the kernels it started."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class WorkerProcess:
    """One ``python -m graders.grade.worker`` process, in its own session so it dies whole."""

    def __init__(self, number: int, log_dir: Path):
        self.log = open(log_dir / f"worker-{number}.log", "ab")  # closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "graders.grade.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, start_new_session=True, cwd=ROOT, text=True,
            bufsize=1)
        self.job: GradingJob | None = None
        self.deadline = 0.0

    def send(self, job: GradingJob, timeout: float) -> None:
        self.job = job
        self.deadline = time.monotonic() + timeout
        try:
            self.process.stdin.write(json.dumps(job.to_json()) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # it died just now: the end of its output reports the job
            pass

    def take_job(self) -> GradingJob:
        """The job in hand, which the worker no longer holds."""
        job, self.job = self.job, None
        return job

    def stop(self) -> None:
        kill_session(self.process)
        self.process.wait()
        self.log.close()


class WorkerPool:
    """``size`` worker processes; a job that runs past ``job_timeout`` seconds costs its worker."""

    def __init__(self, size: int, log_dir: Path, job_timeout: float):
        self.log_dir = log_dir
        self.job_timeout = job_timeout
        self.selector = selectors.DefaultSelector()
        self.spawned = 0
        # one sandbox user per worker, not used by any other grading run on this machine
        self.slots = [claim_slot(LOCAL_SLOTS) for _ in range(max(1, size))]
        self.workers = [self._spawn() for _ in self.slots]

    def run(self, jobs):
        """Grade every job; yields one :class:`Outcome` per job as soon as it is known."""
        queue = list(jobs)
        try:
            while queue or any(worker.job for worker in self.workers):
                self._hand_out(queue)
                for key, _ in self.selector.select(timeout=1.0):
                    outcome = self._receive(key.data)
                    if outcome is not None:
                        # the worker starts its next job while the caller records this one
                        self._hand_out(queue)
                        yield outcome
                yield from self._replace_dead_or_stuck()
        finally:
            self.close()

    def close(self) -> None:
        """Stop every worker and give back their slots (again: nothing more)."""
        for worker in self.workers:
            worker.stop()
        for _, handle in self.slots:
            handle.close()
        self.workers, self.slots = [], []

    def _spawn(self) -> WorkerProcess:
        self.spawned += 1
        worker = WorkerProcess(self.spawned, self.log_dir)
        self.selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        return worker

    def _replace(self, index: int) -> None:
        worker = self.workers[index]
        self.selector.unregister(worker.process.stdout)
        worker.stop()
        self.workers[index] = self._spawn()

    def _hand_out(self, queue: list) -> None:
        # The slot names the sandbox user: one per worker, so per-user limits hold per kernel.
        for worker, (slot, _) in zip(self.workers, self.slots, strict=True):
            if worker.job is None and queue:
                worker.send(replace(queue.pop(0), slot=slot), self.job_timeout)

    def _receive(self, worker: WorkerProcess) -> Outcome | None:
        line = worker.process.stdout.readline()
        if not line:  # the worker died, perhaps under a job
            job = worker.take_job()
            self._replace(self.workers.index(worker))
            return job and Outcome(job, status="failed", reason="grader error: the grading worker died",
                                   detail=f"worker process exited with code {worker.process.wait()}; "
                                          f"see {worker.log.name}")
        if not line.startswith(RESULT):  # libraries print too
            return None
        reply = json.loads(line[len(RESULT):])
        job = worker.take_job()
        if not reply["ok"]:
            return Outcome(job, status="failed", reason=f"grader error: {reply['cause']}",
                           detail=reply["error"])
        return Outcome(job, reply=reply)

    def _replace_dead_or_stuck(self):
        for index, worker in enumerate(self.workers):
            if worker.job and time.monotonic() > worker.deadline:
                job = worker.take_job()
                self._replace(index)
                yield Outcome(job, status="timeout",
                              reason=f"grading took more than {self.job_timeout:g} s and was stopped")
