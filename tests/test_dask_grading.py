"""Grading on a real Dask cluster (``distributed.LocalCluster``, two worker processes on loopback):
each cell's score and each status, as local grading gives them (tests/test_classroom.py), even with
a worker killed mid-task; a killed parent that resumes."""

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time

import nbformat
import psutil
import pytest
from hostile import FULL, MESSAGE_LAYER
from lesson_files import without_demonstrations
from solution_styles import HARD_CODED, LESSON, STYLES, notebook

from graders.grade.classroom import Options, grade_class
from graders.lessons import ROOT

pytestmark = [pytest.mark.kernel, pytest.mark.dask, pytest.mark.classroom]

CLASS = {  # notebook
    "Ana": lambda: notebook(STYLES["terse"]),
    "Ben": lambda: notebook({**STYLES["step_by_step"], "pairwise_distances": HARD_CODED[0]}, "es"),
    # blank, with the kernel's message layer rewritten: the judge decides every point, none is forged
    "Cleo": lambda: notebook({"to_unit_float": MESSAGE_LAYER}),
    "Dev": lambda: notebook({**STYLES["library_calls"], "normalize_rows": "import os\nos._exit(1)"}),
}
GRADED = {  # the grade cells that earn nothing, the status, words of the reason
    "Ana": ((), "graded", ""),
    "Ben": (("test_pairwise_distances",), "graded", ""),
    "Cleo": (tuple(FULL), "graded", ""),
    "Dev": (("test_normalize_rows",), "partial", "killed the kernel"),
}
EXPECTED = {name: sum(FULL.values()) - sum(FULL[cell] for cell in lost)
            for name, (lost, _, _) in GRADED.items()}
TIMEOUT = 60  # seconds per cell: the machine is busy


@pytest.fixture(scope="module")
def cluster():
    import dask
    from distributed import Client, LocalCluster

    # a task whose worker dies is given to another, up to this many times
    with dask.config.set({"distributed.scheduler.allowed-failures": 3}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         dashboard_address=None) as local, \
            Client(local, set_as_default=False) as client:
        yield local, client


@pytest.fixture(scope="module")
def submissions(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dask-class")
    for name, make in CLASS.items():  # what the cluster proves lies in the answers and grade cells
        nbformat.write(without_demonstrations(make()), folder / f"{name}.ipynb")
    return folder


def _grade(submissions, out, **options):
    rows, _ = grade_class(Options(LESSON, submissions, out, workers=2, cell_timeout=TIMEOUT,
                                  progress=False, **options))
    return rows


def _kernels_under(pid: int) -> list[psutil.Process]:
    """The kernels a Dask worker process is running, through its worker program."""
    try:
        found = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    kernels = []
    for process in found:
        try:
            if "ipykernel_launcher" in " ".join(process.cmdline()):
                kernels.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return kernels


def test_the_cluster_gives_each_cell_its_score_and_a_worker_killed_mid_task_costs_a_retry(
        cluster, submissions, tmp_path):
    """One of the two workers is killed while it executes a submission: the class still gets every
    cell's score, status and feedback, as local grading gives them."""
    local, client = cluster
    client.wait_for_workers(2, timeout=120)
    workers = client.run(os.getpid)
    killed: dict = {}

    def kill_one_mid_task():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for pid in workers.values():
                kernels = _kernels_under(pid)
                if kernels:  # a submission is being executed there right now
                    descendants = psutil.Process(pid).children(recursive=True)
                    os.kill(pid, signal.SIGKILL)
                    killed.update(pid=pid, descendants=descendants)
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_one_mid_task)
    killer.start()
    on_dask = _grade(submissions, tmp_path / "dask", scheduler=local.scheduler_address)
    killer.join()
    assert killed, "no worker was caught grading"
    assert {r.student: r.total for r in on_dask} == EXPECTED, [r.reason for r in on_dask]
    for row in on_dask:
        lost, status, reason = GRADED[row.student]
        assert row.cells == {cell: [0 if cell in lost else maximum, maximum]
                             for cell, maximum in FULL.items()}, row
        assert row.status == status and reason in row.reason and bool(reason) == bool(row.reason), row
    # the feedback page made on the worker came back: Ben's hidden test failed, in his edition's words
    feedback = (tmp_path / "dask" / "feedback" / f"{on_dask[1].student_id}.html").read_text()
    assert "Una prueba oculta falló" in feedback
    log = (tmp_path / "dask" / "logs" / "dask-workers.log").read_text()
    assert {line.split(" slot ")[1].strip() for line in log.splitlines() if line.startswith("== ")} <= \
        {"250", "251"}  # one slot per worker thread, in the Dask range
    # its worker program and kernels died with it (PR_SET_PDEATHSIG, bubblewrap's --die-with-parent)
    gone = psutil.wait_procs(killed["descendants"], timeout=30)[1]
    assert gone == [], [p.cmdline() for p in gone]
    client.wait_for_workers(2, timeout=120)  # the nanny started a new one


def test_a_killed_parent_resumes_with_what_is_missing(cluster, submissions, tmp_path):
    local, client = cluster
    client.wait_for_workers(2, timeout=120)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "graders.cli", "grade", str(submissions), "--lesson", LESSON,
               "--scheduler", local.scheduler_address, "--cell-timeout", str(TIMEOUT), "--out-dir", str(out)]
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    for line in first.stdout:
        if line.startswith("[1/4]"):
            os.killpg(first.pid, signal.SIGKILL)
            break
    first.wait()
    # another result may have been recorded between that line and the kill: count what is recorded
    done = len(json.loads((out / "state.json").read_text()))
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "on the Dask cluster at" in second.stdout and "sandbox root" in second.stdout
    progress = [line for line in second.stdout.splitlines() if line.startswith("[")]
    assert done >= 1 and len(progress) == 4 - done, second.stdout
    assert progress[0].startswith(f"[{done + 1}/4]"), second.stdout
    with open(out / "grades.csv", encoding="utf-8") as handle:
        assert {r["student"]: float(r["total"]) for r in csv.DictReader(handle)} == EXPECTED
