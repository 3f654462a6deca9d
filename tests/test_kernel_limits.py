"""Limits per kernel (graders/grade/cgroups.py), proven with a real class: a submission that forks
children which allocate more memory together than its kernel may have, and one that spins a hundred
processes, graded beside honest ones, which keep full marks; the machine and the grader survive."""

import json
import subprocess
import sys
from dataclasses import asdict

import nbformat
import pytest
from hostile import forks_and_allocates, solved, spins

from graders.grade import pool
from graders.grade.cgroups import Cgroups, detect, slot_folders
from graders.grade.classroom import Options, grade_class
from graders.grade.sandbox import GIB, LOCAL_SLOTS, Limits, claim_slot, detect_mode
from graders.lessons import ROOT

LESSON = "01_tensors"
# Small enough that three children of 2 GiB overrun it fast, large enough for torch: a kernel per
# worker slot, on one core each.
LIMITS = Limits(memory_bytes=4 * GIB, threads=1)


def counters(cgroups: Cgroups, slot: int) -> dict[str, int]:
    """A slot cgroup's count of OOM kills and of CPU periods throttled (0 before its first kernel)."""
    folders = slot_folders(cgroups, slot)
    files = [folders["memory"] / "memory.oom_control", folders["memory"] / "memory.events",
             folders["cpu"] / "cpu.stat"]
    found = dict.fromkeys(("oom_kill", "nr_throttled"), 0)
    for line in (line for file in files if file.exists() for line in file.read_text().splitlines()):
        name, _, value = line.partition(" ")
        if name in found:
            found[name] = int(value)
    return found


@pytest.mark.kernel
@pytest.mark.classroom
def test_forks_that_allocate_and_processes_that_spin_cost_only_their_own_kernel(tmp_path, monkeypatch):
    """Each attack's answer is right only where the attack really ran and was contained; the OOM
    killer acts in one slot's cgroup, the attacker's, and the honest submissions keep full marks."""
    cgroups = detect()
    if detect_mode() == "none":
        pytest.skip("bubblewrap is missing: kernels start without the sandbox's launcher, which "
                    "gives each its cgroup")
    if not cgroups.version:
        pytest.skip(f"no cgroup per kernel on this machine: {cgroups.reason}")
    monkeypatch.setattr(Limits, "for_workers", staticmethod(lambda workers, total_memory=None: LIMITS))
    submissions = tmp_path / "in"
    submissions.mkdir()
    # Graded in this order, two at a time: the spinner still spins while the honest ones run.
    for name, nb in (("a spins", spins(processes=100, seconds=30)),
                     ("b forks and allocates", forks_and_allocates(children=3, child_bytes=2 * GIB)),
                     ("c honest", solved()), ("d honest", solved())):
        nbformat.write(nb, submissions / f"{name}.ipynb")
    claimed = {}  # each slot this grader claims: its counters then

    def claim(slots, folder=None):
        slot, handle = claim_slot(slots, folder)
        claimed[slot] = counters(cgroups, slot)
        return slot, handle

    monkeypatch.setattr(pool, "claim_slot", claim)

    rows, _ = grade_class(Options(LESSON, submissions, tmp_path / "out", workers=2, cell_timeout=60,
                                  progress=False))

    by_name = {row.student: row for row in rows}
    assert sorted(by_name) == ["a spins", "b forks and allocates", "c honest", "d honest"]
    for name in ("c honest", "d honest"):
        assert (by_name[name].status, by_name[name].total) == ("graded", 11), by_name[name].reason
    for row in rows:
        assert "grader error" not in row.reason, f"{row.student}: {row.reason}"
    # each attack's answer is right only where it happened: all spinners started, and some children
    # were stopped before they held their memory
    assert by_name["a spins"].cells["test_to_unit_float"][0] == 1, by_name["a spins"].reason
    assert by_name["b forks and allocates"].cells["test_to_unit_float"][0] == 1, \
        by_name["b forks and allocates"].reason
    grew = {name: [slot for slot, before in claimed.items() if counters(cgroups, slot)[name] > before[name]]
            for name in ("oom_kill", "nr_throttled")}
    assert len(grew["oom_kill"]) == 1, f"OOM kills in the slot cgroups {grew['oom_kill']}, not one"
    assert grew["nr_throttled"], "no kernel's cgroup was held to its share of the cores"


# A launcher as the sandbox's: joins its slot's cgroup, says so, and becomes another program.
LAUNCHER = """import json, os, sys
from graders.grade import cgroups
cgroups.enter(cgroups.Cgroups(**json.loads(sys.argv[1])), int(sys.argv[2]), 2**30, 64, 1)
print("in", flush=True)
os.execvp(sys.argv[3], sys.argv[3:])
"""


@pytest.mark.subprocess
def test_what_a_killed_grader_left_in_a_slot_dies_when_the_slots_next_kernel_starts():
    cgroups = detect()
    if not cgroups.version:
        pytest.skip(f"no cgroup per kernel on this machine: {cgroups.reason}")
    slot, handle = claim_slot(LOCAL_SLOTS)

    def launch(*program):
        return subprocess.Popen([sys.executable, "-c", LAUNCHER, json.dumps(asdict(cgroups)), str(slot),
                                 *program], cwd=ROOT, stdout=subprocess.PIPE, text=True)

    left = launch("sleep", "60")  # its grader was killed, and nothing killed it
    try:
        assert left.stdout.readline() == "in\n"
        assert launch("true").wait(timeout=30) == 0
        assert left.wait(timeout=10) == -9, "the previous kernel's process outlived the slot's next start"
    finally:
        left.kill()
        left.wait()
        handle.close()
