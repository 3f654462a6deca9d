"""The Dask pool's parts that need no cluster: slots, replies checked as data, jobs sent as data."""

import json
import socket
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from graders.grade import dask_pool
from graders.grade.dask_pool import DaskUnavailable, WorkerNotReady, accept
from graders.grade.job import LOCAL, GradingJob, MalformedJob
from graders.grade.sandbox import NoFreeSlot, claim_slot


@pytest.mark.subprocess
def test_slots_are_unique_on_a_machine_and_freed_with_their_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from graders.grade.sandbox import claim_slot
        number, handle = claim_slot(range(7, 10), {str(tmp_path)!r})  # held while handle lives
        print(number, flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "7"  # another process holds the first slot
        second, handle = claim_slot(range(7, 10), tmp_path)
        third, _ = claim_slot(range(7, 10), tmp_path)
        assert (second, third) == (8, 9)
        with pytest.raises(NoFreeSlot, match="all 3 grading slots"):
            claim_slot(range(7, 10), tmp_path)
        handle.close()  # a thread that gives its slot up
        assert claim_slot(range(7, 10), tmp_path)[0] == 8
    finally:
        holder.kill()
        holder.wait()
    assert claim_slot(range(7, 10), tmp_path)[0] == 7  # the lock died with its process


def test_dask_slots_stay_clear_of_local_workers_and_inside_the_sandbox_range():
    from graders.grade.sandbox import MAX_SLOTS

    assert dask_pool.SLOTS.start >= 64 and dask_pool.SLOTS.stop <= MAX_SLOTS


def _job(tmp_path, **changes) -> GradingJob:
    """A complete job; the files it names exist only where a test makes them."""
    return replace(GradingJob(
        number=3, lesson="01_tensors", student_id="ana-123", notebook=tmp_path / "in.ipynb",
        master=tmp_path / "course", template_db=tmp_path / "t.db", work_dir=tmp_path / "w",
        socket_dir=tmp_path / "s", jupyter_path=tmp_path / "j", cell_timeout=60, notebook_timeout=600,
        sandbox="on", kernel_name="course-sandbox", submitter=("Ana", "ana-123"),
        roster=(("Ana", "ana-123"), ("Ben",)), judge_secret="term", slot=2), **changes)


def test_a_job_round_trips_through_json_equal_to_itself(tmp_path):
    job = _job(tmp_path)
    assert GradingJob.from_json(json.loads(json.dumps(job.to_json()))) == job


@pytest.mark.parametrize(("change", "message"), [
    (lambda data: data.pop("roster"), "missing key 'roster'"),
    (lambda data: data.update(slots=1), "unknown key 'slots'"),
    (lambda data: data.update(cell_timeout="60"), "'cell_timeout' must be an integer, not '60'"),
    (lambda data: data.update(number=True), "'number' must be an integer, not True"),
    (lambda data: data.update(work_dir=None), "'work_dir' must be a path"),
    (lambda data: data.update(roster=[["Ana"], "Ben"]), "'roster' must be a list of lists of strings"),
])
def test_a_job_with_a_key_missing_unknown_or_of_the_wrong_type_is_refused_naming_it(tmp_path, change,
                                                                                     message):
    data = _job(tmp_path).to_json()
    change(data)
    with pytest.raises(MalformedJob, match=f"^grading job: {message}"):
        GradingJob.from_json(data)


@pytest.mark.parametrize("result", [
    None, "graded", {"status": "hacked"}, {"status": "graded", "reply": {"cells": {}}},
    {"status": "graded", "reply": [], "autograded": "{}"},
    {"status": "graded", "reply": {}, "autograded": "{}", "feedback": 42},
])
def test_a_malformed_reply_fails_the_submission_and_writes_nothing(tmp_path, result):
    outcome = accept(_job(tmp_path), result, tmp_path)
    assert (outcome.status, outcome.reply) == ("failed", None)
    assert "malformed reply" in outcome.reason
    assert not (tmp_path / "w").exists()


def test_a_graded_reply_lands_where_the_parent_reads_a_local_workers(tmp_path):
    result = {"status": "graded", "reply": {"cells": {"t": [1, 1]}, "incidents": [], "seconds": 2.0},
              "autograded": '{"cells": []}', "feedback": "<html>é</html>", "worker": "tcp://w:1",
              "slot": 250, "log": "kernel said hi"}
    outcome = accept(_job(tmp_path), result, tmp_path)
    assert outcome.reply["cells"] == {"t": [1, 1]}
    assert json.loads(open(outcome.reply["autograded"]).read()) == {"cells": []}
    assert open(outcome.reply["feedback"], encoding="utf-8").read() == "<html>é</html>"
    log = (tmp_path / "dask-workers.log").read_text()
    assert "ana-123: graded on tcp://w:1 slot 250" in log and "kernel said hi" in log


def test_a_worker_that_refused_or_ran_out_of_time_says_so(tmp_path):
    refused = accept(_job(tmp_path), {"status": "failed", "reason": "grader error: bubblewrap is "
                                      "missing", "detail": "the story"}, tmp_path)
    assert (refused.status, refused.reason) == ("failed", "grader error: bubblewrap is missing")
    assert refused.detail == "the story"  # the parent writes it to logs/<student_id>.log
    assert "the story" in (tmp_path / "dask-workers.log").read_text()
    late = accept(_job(tmp_path), {"status": "timeout", "reason": "took too long"}, tmp_path)
    assert (late.status, late.reason) == ("timeout", "took too long")


def test_a_job_travels_as_data_without_the_parents_paths(tmp_path, monkeypatch):
    notebook = tmp_path / "in.ipynb"
    notebook.write_bytes(b'{"cells": []}')
    monkeypatch.setenv("COURSE_FAST", "0")
    job = _job(Path("/parent"), notebook=notebook, socket_dir=Path("/tmp/s"))
    task = dask_pool.task_of(job, "off")
    assert not any(str(value).startswith(("/parent", str(tmp_path))) for value in task["job"].values())
    assert (task["notebook_bytes"], task["job"]["sandbox"], task["job"]["cell_timeout"]) == \
        (b'{"cells": []}', "off", 60)
    assert task["environment"]["COURSE_FAST"] == "0"
    # the worker's own paths complete it; the parent's, sent by mistake, are refused
    local = _job(tmp_path / "worker")
    sent = GradingJob.decode_portable(json.loads(json.dumps(task["job"])))
    assert GradingJob(**sent, **{name: getattr(local, name) for name in LOCAL}) == \
        replace(local, sandbox="off")
    with pytest.raises(MalformedJob, match="unknown key 'jupyter_path', 'master', 'notebook', 'slot'"):
        GradingJob.decode_portable(job.to_json())


def test_the_lesson_bundle_changes_with_the_template(tmp_path):
    source = tmp_path / "course" / "source" / "01_tensors"
    source.mkdir(parents=True)
    (source / "01_tensors.ipynb").write_text("{}")
    (tmp_path / "t.db").write_bytes(b"one")
    job = _job(tmp_path)
    first = dask_pool.lesson_bundle(job)
    assert first["files"] == {"01_tensors.ipynb": b"{}"} and first["template"] == b"one"
    (tmp_path / "t.db").write_bytes(b"two")
    assert dask_pool.lesson_bundle(job)["digest"] != first["digest"]


def test_an_unreachable_scheduler_says_how_to_start_one():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DaskUnavailable, match="dask scheduler"):
        dask_pool.connect(f"tcp://127.0.0.1:{port}", timeout=2)


def test_a_worker_without_bubblewrap_refuses_a_sandboxed_run(monkeypatch):
    monkeypatch.setattr("graders.grade.sandbox.detect_mode", lambda: "none")
    with pytest.raises(WorkerNotReady, match="bubblewrap is missing on the Dask worker"):
        dask_pool.sandbox_policy("on")
    assert dask_pool.sandbox_policy("off").mode == "none"  # the instructor said so
    monkeypatch.setenv("COURSE_GRADERS_PER_MACHINE", "1")
    monkeypatch.setattr("graders.grade.sandbox.detect_mode", lambda: "userns")
    alone = dask_pool.sandbox_policy("on")
    monkeypatch.setenv("COURSE_GRADERS_PER_MACHINE", "64")
    assert (alone.mode, alone.limits.memory_bytes >= dask_pool.sandbox_policy("on").limits.memory_bytes) == \
        ("userns", True)


def _lesson_job(tmp_path) -> GradingJob:
    """A job whose files exist, enough to be sent (not to be graded)."""
    source = tmp_path / "course" / "source" / "01_tensors"
    source.mkdir(parents=True)
    (source / "01_tensors.ipynb").write_text("{}")
    (tmp_path / "t.db").write_bytes(b"db")
    (tmp_path / "in.ipynb").write_text("{}")
    return _job(tmp_path, number=0, student_id="s", sandbox="off")


@pytest.mark.dask
def test_a_task_that_raises_on_the_worker_fails_its_submission_with_the_story(tmp_path, monkeypatch):
    from distributed import LocalCluster

    task_of = dask_pool.task_of

    def without_its_number(job, sandbox):  # the worker refuses the job before grading: it raises
        task = task_of(job, sandbox)
        del task["job"]["number"]
        return task

    monkeypatch.setattr(dask_pool, "task_of", without_its_number)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as one:
        outcomes = list(dask_pool.DaskPool(one.scheduler_address, tmp_path, 60).run([_lesson_job(tmp_path)]))
    assert [(o.status, o.reason) for o in outcomes] == \
        [("failed", "grader error on the Dask cluster: MalformedJob: grading job: missing key 'number'")]
    assert "Traceback" in outcomes[0].detail and "_grade" in outcomes[0].detail


@pytest.mark.dask
def test_with_no_worker_for_too_long_the_waiting_jobs_fail_and_stay_to_grade(tmp_path, monkeypatch):
    from distributed import LocalCluster

    job = _lesson_job(tmp_path)
    monkeypatch.setattr(dask_pool, "WAIT_S", 0.2)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as empty:
        pool = dask_pool.DaskPool(empty.scheduler_address, tmp_path, 60, no_workers_s=1)
        outcomes = list(pool.run([job]))
    assert [(o.status, o.job.student_id) for o in outcomes] == [("failed", "s")]
    assert "no Dask worker connected" in outcomes[0].reason  # "failed": the next run grades it again


def test_local_pools_take_slots_no_other_grading_run_holds(tmp_path):
    """Two grading runs at once on one machine never share a sandbox user (slots in a folder of the
    test's own: the machine's are held by the other tests' graders)."""
    from graders.grade import sandbox

    first = [sandbox.claim_slot(sandbox.LOCAL_SLOTS, tmp_path) for _ in range(2)]
    second = [sandbox.claim_slot(sandbox.LOCAL_SLOTS, tmp_path) for _ in range(2)]
    assert [n for n, _ in first] == [0, 1] and [n for n, _ in second] == [2, 3]
    for _, handle in first:
        handle.close()
    assert sandbox.claim_slot(sandbox.LOCAL_SLOTS, tmp_path)[0] == 0
