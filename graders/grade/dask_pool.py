"""Grading on a Dask distributed cluster: ``course grade … --scheduler tcp://HOST:8786``.

:class:`DaskPool` has the interface of :class:`graders.grade.pool.WorkerPool`: ``run(jobs)``
yields one :class:`Outcome` per job, and the parent stays the only writer of the gradebook, the
CSV and the state file, validating every reply as with local workers.

A job's paths are on the parent's filesystem, so a task carries what it needs as data: the
submission's bytes, and once per run (scattered to the workers) the lesson's source folder and the
template gradebook. On the worker, each task runs the same worker program as local grading
(``python -m graders.grade.worker``, one JSON job in, one ``@@course-result`` line out) in
the same sandbox, in a private scratch folder with its own kernelspec, and sends back the
autograded notebook and the feedback page as text, which the parent writes where
``Classroom._record_outcome`` reads them.

Each Dask worker thread keeps one worker program alive between tasks (its imports are paid once),
in its own session, killed if the thread's process dies (``PR_SET_PDEATHSIG``), so a worker
killed mid-task leaves no grader behind; the scheduler gives the task to another worker
(``distributed.scheduler.allowed-failures`` times). Each thread also holds a **slot**
(``sandbox.claim_slot``, a lock file no other grader on that machine holds), so two tasks running at
once on one machine never share a sandbox user. Dask slots come from ``SLOTS``, above the local
pools' ``sandbox.LOCAL_SLOTS``: a machine may run both.
Run workers with ``--nthreads 1``: one submission at a time per worker process.
"""

import ctypes
import hashlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from dataclasses import replace
from pathlib import Path

from graders.grade.job import GradingJob
from graders.grade.pool import Outcome, kill_session
from graders.grade.sandbox import NoFreeSlot, claim_slot, socket_root

ENVIRONMENT = ("COURSE_FAST", "COURSE_DEVICE", "COURSE_DATA_DIR")  # what grading reads from the parent
MAX_RETURNED_BYTES = 256 * 1024**2
LOG_TAIL_BYTES = 20_000
WAIT_S = 5.0  # how often the parent checks that the cluster still has workers
NO_WORKERS_S = 300.0  # with no worker for this long, the jobs still running end as failed
SLOTS = range(250, 500)  # within sandbox.MAX_SLOTS, above sandbox.LOCAL_SLOTS


class DaskUnavailable(RuntimeError):
    """The scheduler cannot be reached, or its workers cannot run the course's grader."""


# == the parent ==============================================================================
def connect(address: str, timeout: float = 30):
    """A ``distributed.Client`` on ``address``, or :class:`DaskUnavailable` saying what to do."""
    from distributed import Client

    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise DaskUnavailable(f"cannot reach the Dask scheduler at {address} ({error}); start one "
                              "with `dask scheduler` and workers with `dask worker ADDRESS --nthreads 1`"
                              ) from error


def worker_facts() -> dict:
    """What a worker says about itself (run on every worker by :func:`describe_cluster`)."""
    from graders.grade.sandbox import detect_mode

    return {"host": socket.gethostname(), "sandbox": detect_mode(), "python": platform.python_version()}


def describe_cluster(address: str, sandbox: str = "auto") -> list[str]:
    """One line per worker (host, sandbox, Python), for the instructor to check before grading."""
    client = connect(address)
    try:
        facts = client.run(worker_facts)
    except Exception as error:  # a worker without the course package cannot even unpickle the call
        raise DaskUnavailable(f"the Dask workers at {address} cannot run the course's grader "
                              f"({type(error).__name__}: {error}); install the course on every worker"
                              ) from error
    finally:
        client.close()
    if not facts:
        return [f"no worker is connected to {address} yet: grading waits for one "
                f"(up to {NO_WORKERS_S:.0f} s without any)"]
    lines = []
    for address_, fact in sorted(facts.items()):
        refused = sandbox != "off" and fact["sandbox"] == "none"
        lines.append(f"{address_} on {fact['host']}: Python {fact['python']}, sandbox "
                     + ("MISSING: this worker refuses to grade (install bubblewrap there)" if refused
                        else "off (--sandbox off)" if sandbox == "off" else fact["sandbox"]))
    return lines


def lesson_bundle(job: GradingJob) -> dict:
    """What every task of a run needs from the parent: the lesson's source folder, the template."""
    source = job.master / "source" / job.lesson
    files = {str(p.relative_to(source)): p.read_bytes() for p in sorted(source.rglob("*")) if p.is_file()}
    template = job.template_db.read_bytes()
    digest = hashlib.sha256(template + json.dumps(sorted(files)).encode()
                            + b"".join(files[name] for name in sorted(files))).hexdigest()
    return {"lesson": job.lesson, "files": files, "template": template, "digest": digest}


def task_of(job: GradingJob, sandbox: str) -> dict:
    """A job as data: the submission's bytes instead of its path; paths are made on the worker.
    Whether to sandbox is the cluster's option, not what the parent's own machine allows."""
    return {"job": replace(job, sandbox="off" if sandbox == "off" else "on").portable(),
            "notebook_bytes": job.notebook.read_bytes(),
            "environment": {name: os.environ[name] for name in ENVIRONMENT if name in os.environ}}


class DaskPool:
    """Grade jobs on the workers of the Dask scheduler at ``address`` (same interface as WorkerPool)."""

    def __init__(self, address: str, log_dir: Path, job_timeout: float, sandbox: str = "auto",
                 no_workers_s: float = NO_WORKERS_S):
        self.address, self.log_dir, self.job_timeout = address, Path(log_dir), job_timeout
        self.sandbox, self.no_workers_s = sandbox, no_workers_s
        self._alone_since: float | None = None
        self.client = connect(address)
        from distributed import as_completed

        self.done = as_completed(loop=self.client.loop)  # futures come out of it once finished

    def run(self, jobs):
        """Grade every job; yields one :class:`Outcome` per job as soon as it is known."""
        queue = list(jobs)
        running: dict = {}  # future -> job
        try:
            if queue and not self._wait_for_a_worker():
                yield from (self._no_worker(job) for job in queue)
                return
            if queue:  # once for the whole run: it needs a worker to hold it
                bundle = self.client.scatter(lesson_bundle(queue[0]), broadcast=True, hash=False)
            while queue or running:
                # a bounded number in flight: submissions are read only when a worker will soon want them
                capacity = max(2, 2 * sum(self.client.nthreads().values()))
                while queue and len(running) < capacity:
                    job = queue.pop(0)
                    running[self._submit(job, bundle)] = job
                for future in self._finished(running):
                    job = running.pop(future, None)  # one given up on may still come out later
                    if job is not None:
                        yield self._outcome(job, future)
        finally:
            for future in running:
                future.cancel()
            self.client.close()

    def _submit(self, job: GradingJob, bundle):
        # grade_on_worker travels by reference: every worker imports it from the installed course
        future = self.client.submit(grade_on_worker, task_of(job, self.sandbox), bundle, self.job_timeout,
                                    key=f"course-grade-{job.student_id}-{uuid.uuid4().hex[:8]}",
                                    pure=False)
        self.done.add(future)
        return future

    def _finished(self, running: dict) -> list:
        """The futures done within ``WAIT_S``; with no worker for too long, all of them (cancelled)."""
        deadline = time.monotonic() + WAIT_S
        while not self.done.has_ready() and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.done.has_ready():
            return self.done.next_batch(block=False)
        if self.client.nthreads():
            self._alone_since = None
            return []
        self._alone_since = self._alone_since or time.monotonic()
        if time.monotonic() - self._alone_since < self.no_workers_s:
            return []
        for future in running:
            future.cancel()
        return list(running)

    def _wait_for_a_worker(self) -> bool:
        try:
            self.client.wait_for_workers(1, timeout=self.no_workers_s)
        except TimeoutError:
            return False
        return True

    def _no_worker(self, job: GradingJob) -> Outcome:
        return Outcome(job, status="failed", reason=f"grader error: no Dask worker connected to "
                       f"{self.address} for {self.no_workers_s:g} s")

    def _outcome(self, job: GradingJob, future) -> Outcome:
        if future.status == "cancelled":
            return self._no_worker(job)
        if future.status == "error":
            error = future.exception()
            text = (str(error).strip().splitlines() or [""])[-1]
            story = "".join(traceback.format_exception(type(error), error, future.traceback()))
            return Outcome(job, status="failed",
                           reason=f"grader error on the Dask cluster: {type(error).__name__}: {text}",
                           detail=story)
        result = future.result()
        future.release()
        return accept(job, result, self.log_dir)


def accept(job: GradingJob, result, log_dir: Path) -> Outcome:
    """What a worker sent is data: check its shape, log it, and write its files where the parent
    reads a local worker's (``job.work_dir``)."""
    malformed = Outcome(job, status="failed", reason="grader error: a malformed reply from a Dask worker")
    if not isinstance(result, dict) or result.get("status") not in ("graded", "failed", "timeout"):
        return malformed
    with open(Path(log_dir) / "dask-workers.log", "a", encoding="utf-8") as log:
        # a failure's whole story (``detail``) and the worker program's stderr
        log.write(f"== {job.student_id}: {result['status']} on {result.get('worker', '?')} "
                  f"slot {result.get('slot', '?')}\n{str(result.get('detail', ''))[-LOG_TAIL_BYTES:]}"
                  f"{str(result.get('log', ''))[-LOG_TAIL_BYTES:]}\n")
    if result["status"] != "graded":
        return Outcome(job, status=result["status"], reason=str(result.get("reason", ""))[:2000],
                       detail=str(result.get("detail", "")))
    autograded, feedback, reply = result.get("autograded"), result.get("feedback"), result.get("reply")
    if not (_text(autograded) and isinstance(reply, dict) and (feedback is None or _text(feedback))):
        return malformed
    returned = job.work_dir / "returned"
    returned.mkdir(parents=True, exist_ok=True)
    (returned / f"{job.lesson}.ipynb").write_text(autograded, encoding="utf-8")
    if feedback is not None:
        (returned / "feedback.html").write_text(feedback, encoding="utf-8")
    return Outcome(job, reply={**reply, "autograded": str(returned / f"{job.lesson}.ipynb"),
                               "feedback": str(returned / "feedback.html")})


def _text(value) -> bool:
    return isinstance(value, str) and len(value) < MAX_RETURNED_BYTES


# == the worker ==============================================================================
_THREAD = threading.local()


def grade_on_worker(task: dict, bundle: dict, timeout: float) -> dict:
    """A Dask task: grade one submission with this thread's worker program; returns data only."""
    grader = getattr(_THREAD, "grader", None)
    if grader is None:
        grader = _THREAD.grader = ThreadGrader()
    return grader.grade(task, bundle, timeout)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the worker program's process before it starts: the kernel sends it SIGKILL when the
    thread that started it (a Dask worker's) dies, so a killed Dask worker leaves no grader behind."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ThreadGrader:
    """What one Dask worker thread keeps between tasks: its slot, a scratch folder with the lesson
    unpacked and a kernelspec, and a running worker program."""

    def __init__(self):
        self.slot, self._slot_handle = claim_slot(SLOTS)
        # a short folder named after this process: swept by later runs once the process is gone
        self.root = socket_root()
        self.prepared: tuple | None = None
        self.environment: dict = {}
        self.process: subprocess.Popen | None = None
        self.log_path = self.root / "worker.log"
        self.log_path.touch()

    def grade(self, task: dict, bundle: dict, timeout: float) -> dict:
        from distributed import get_worker

        where = {"worker": f"{get_worker().address} ({socket.gethostname()})", "slot": self.slot}
        log_start = self.log_path.stat().st_size
        try:
            result = self._grade(task, bundle, timeout)
        except (WorkerNotReady, NoFreeSlot) as reason:
            result = {"status": "failed", "reason": f"grader error: {reason}"}
        with open(self.log_path, "rb") as log:
            log.seek(log_start)
            result["log"] = log.read()[-LOG_TAIL_BYTES:].decode("utf-8", "replace")
        return {**result, **where}

    def _grade(self, task: dict, bundle: dict, timeout: float) -> dict:
        from graders.grade.worker import RESULT

        sent = GradingJob.decode_portable(task["job"])  # data from the parent: checked first
        paths = self._prepare(bundle, sent["sandbox"], task["environment"])
        work_dir = self.root / "w" / "jobs" / sent["student_id"]
        socket_dir = self.root / "s" / str(sent["number"])
        for folder in (work_dir, socket_dir):
            _fresh(folder)
        notebook = work_dir / "submission.ipynb"
        notebook.write_bytes(task["notebook_bytes"])
        job = GradingJob(**sent, **paths, notebook=notebook, work_dir=work_dir, socket_dir=socket_dir,
                         slot=self.slot)
        try:
            line = self._exchange(json.dumps(job.to_json()), timeout)
            if line is None:
                return {"status": "timeout",
                        "reason": f"grading took more than {timeout:g} s and was stopped"}
            if not line:
                return {"status": "failed", "reason": "grader error: the grading worker died"}
            reply = json.loads(line[len(RESULT):])
            if not reply["ok"]:
                cause = reply.get("cause") or reply["error"].strip().splitlines()[-1]
                return {"status": "failed", "reason": f"grader error: {cause}", "detail": reply["error"]}
            kept = {k: reply[k] for k in ("cells", "incidents", "seconds")}
            return {"status": "graded", "reply": {**kept, "feedback_fault": reply.get("feedback_fault")},
                    "autograded": Path(reply["autograded"]).read_text(encoding="utf-8"),
                    "feedback": (Path(reply["feedback"]).read_text(encoding="utf-8")
                                 if reply["feedback"] and Path(reply["feedback"]).exists() else None)}
        finally:
            for folder in (work_dir, socket_dir):
                _remove(folder)

    def _prepare(self, bundle: dict, sandbox: str, environment: dict) -> dict[str, Path]:
        """The lesson's source, the template gradebook and the kernelspec, once per lesson bundle;
        returns the job's fields that name them."""
        from graders.grade.sandbox import write_kernelspec

        key = (bundle["digest"], sandbox, tuple(sorted(environment.items())))
        base = self.root / "w" / bundle["digest"][:16]
        paths = {"master": base / "master", "template_db": base / "template.db",
                 "jupyter_path": base / "jupyter"}
        if self.prepared == key:
            return paths
        policy = sandbox_policy(sandbox)  # before anything is written: a worker may refuse
        self._stop()
        _fresh(base)
        for name, content in bundle["files"].items():
            target = base / "master" / "source" / bundle["lesson"] / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        (base / "template.db").write_bytes(bundle["template"])
        if policy.mode != "none":
            write_kernelspec(base / "jupyter" / "kernels", policy)
        self.environment = environment
        self.prepared = key
        return paths

    def _exchange(self, line: str, timeout: float) -> str | None:
        """Send one job to the worker program and read its result line: ``None`` on timeout (the
        program is killed), ``""`` if it died."""
        from graders.grade.worker import RESULT

        process = self._program()
        expired = threading.Event()
        timer = threading.Timer(timeout, lambda: (expired.set(), kill_session(process)))
        timer.start()
        try:
            process.stdin.write(line + "\n")
            process.stdin.flush()
            for output in process.stdout:
                if output.startswith(RESULT):  # libraries print too
                    return output
        except BrokenPipeError:  # it died before reading the job
            pass
        finally:
            timer.cancel()
        self._stop()
        return None if expired.is_set() else ""

    def _program(self) -> subprocess.Popen:
        if self.process is None or self.process.poll() is not None:
            from graders.lessons import ROOT

            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "graders.grade.worker"], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=log, start_new_session=True, cwd=ROOT, text=True,
                    bufsize=1, env={**os.environ, **self.environment},
                    preexec_fn=_die_with_parent)
        return self.process

    def _stop(self) -> None:
        """Kill the worker program and its kernels (its whole session)."""
        process, self.process = self.process, None
        if process is None:
            return
        kill_session(process)
        process.wait()
        for pipe in (process.stdin, process.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class WorkerNotReady(RuntimeError):
    """This worker cannot grade as asked (no bubblewrap for a sandboxed run)."""


def sandbox_policy(sandbox: str):
    """The sandbox this worker machine gives kernels; it refuses to grade unsandboxed unless told."""
    from graders.grade.sandbox import Limits, Policy, detect_mode

    mode = "none" if sandbox == "off" else detect_mode()
    if sandbox != "off" and mode == "none":
        raise WorkerNotReady(f"bubblewrap is missing on the Dask worker {socket.gethostname()}: "
                             "install it there (apt-get install bubblewrap), or grade with --sandbox off")
    # the machine's memory is shared by the graders it runs: by default one per core
    graders = int(os.environ.get("COURSE_GRADERS_PER_MACHINE", os.cpu_count() or 1))
    return Policy(mode, Limits.for_workers(graders))


def _fresh(folder: Path) -> None:
    _remove(folder)
    folder.mkdir(parents=True)


def _remove(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
