"""The sandbox's launcher, which starts every graded kernel: what it costs before the kernel runs, and
the cgroup it gives the kernel (graders/grade/cgroups.py), decided on fake cgroup trees."""

import json
import os
import subprocess
import sys

import pytest

from graders.grade import cgroups
from graders.grade.sandbox import GIB, POLICY_ENV, Limits, Policy, _join_cgroup, policy_of, write_kernelspec


@pytest.mark.subprocess
def test_the_launcher_imports_neither_torch_nor_the_lesson_helpers():
    """Each graded kernel starts through ``python -m graders.grade.sandbox``; importing torch there
    cost every submission about a second before its own kernel had started (issue 21)."""
    probe = "import sys, graders.grade.sandbox; print(sorted({'torch', 'course'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", f"the sandbox's launcher imports {loaded.stdout.strip()}"


# ---------------------------------------------------------------- a cgroup per kernel, on fake trees
def _mountinfo(*mounts) -> str:
    """A /proc/self/mountinfo text of ``(fstype, root, point, super options)`` cgroup mounts, read-write
    unless the options start with ``ro``, after the tmpfs that holds them."""
    lines = ["31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755"]
    for number, (fstype, root, point, options) in enumerate(mounts, start=32):
        mode = "ro" if options.startswith("ro") else "rw"
        lines.append(f"{number} 31 0:{number} {root} {point} {mode},relatime - {fstype} {fstype} {options}")
    return "\n".join(lines) + "\n"


def _folders(tmp_path, *paths):
    for path in paths:
        (tmp_path / path).mkdir(parents=True, exist_ok=True)


V1_OWN = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/42\n1:cpu,cpuacct:/\n0::/\n"


def _v1_machine(tmp_path, memory_options="rw,memory"):
    """This project's machines: v1 hierarchies, the grader's memory cgroup nested, an empty v2."""
    _folders(tmp_path, "memory/process_api/42", "pids", "cpu,cpuacct", "unified")
    (tmp_path / "unified" / "cgroup.controllers").write_text("\n")
    return _mountinfo(("cgroup", "/", tmp_path / "cpu,cpuacct", "rw,cpu,cpuacct"),
                      ("cgroup", "/", tmp_path / "memory", memory_options),
                      ("cgroup", "/", tmp_path / "pids", "rw,pids"),
                      ("cgroup2", "/", tmp_path / "unified", "rw"))


def test_cgroup_v1_slots_go_under_the_graders_own_cgroup_of_each_controller(tmp_path):
    found = cgroups.detect(_v1_machine(tmp_path), V1_OWN)
    assert found == cgroups.Cgroups(1, {"memory": f"{tmp_path}/memory/process_api/42/course-grader",
                                        "pids": f"{tmp_path}/pids/course-grader",
                                        "cpu": f"{tmp_path}/cpu,cpuacct/course-grader"})


def test_a_container_that_mounts_only_its_own_cgroup_is_read_where_it_shows_it(tmp_path):
    _folders(tmp_path, "memory", "pids", "cpu/x")
    mounts = _mountinfo(*[("cgroup", "/docker/abc", tmp_path / name, f"rw,{name}")
                          for name in ("memory", "pids", "cpu")])
    found = cgroups.detect(mounts, "3:memory:/docker/abc\n2:pids:/docker/abc\n1:cpu:/docker/abc/x\n")
    assert found.folders["memory"] == f"{tmp_path}/memory/course-grader"
    assert found.folders["cpu"] == f"{tmp_path}/cpu/x/course-grader"


@pytest.mark.parametrize("breaks, reason", [
    ("no pids hierarchy", "cgroup v1 without the pids controller"),
    ("memory mounted read-only", "memory is mounted read-only (remount it read-write"),
    ("own memory cgroup missing", "process_api/42 does not exist"),
    ("not root", "is not writable (grade as root, or from a cgroup delegated to you)"),
])
def test_where_cgroup_v1_cannot_be_used_it_says_why(tmp_path, monkeypatch, breaks, reason):
    mounts = _v1_machine(tmp_path, "ro,memory" if breaks == "memory mounted read-only" else "rw,memory")
    if breaks == "no pids hierarchy":
        mounts = "\n".join(line for line in mounts.splitlines() if "pids" not in line)
    if breaks == "own memory cgroup missing":
        (tmp_path / "memory" / "process_api" / "42").rmdir()
    if breaks == "not root":
        monkeypatch.setattr(cgroups.os, "access", lambda path, mode: False)
    found = cgroups.detect(mounts, V1_OWN)
    assert (found.version, found.folders) == (0, {}) and reason in found.reason, found.reason


def _v2_machine(tmp_path, own: str, delegated: str = "cpu memory pids") -> str:
    """A v2 hierarchy with the grader in ``own``; the cgroups above it delegate ``delegated``."""
    (tmp_path / own.strip("/")).mkdir(parents=True, exist_ok=True)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    folder = tmp_path / own.strip("/")
    for parent in [folder.parent, *folder.parent.parents]:
        if parent.is_relative_to(tmp_path):
            (parent / "cgroup.subtree_control").write_text(delegated + "\n")
    if own != "/":
        (folder / "memory.max").write_text("max\n")
    return _mountinfo(("cgroup2", "/", tmp_path, "rw,nsdelegate"))


def test_cgroup_v2_slots_go_beside_the_graders_own_cgroup(tmp_path):
    """v2 gives no controller below a cgroup that holds processes: the slots go in its parent."""
    found = cgroups.detect(_v2_machine(tmp_path, "/grading/grader"), "0::/grading/grader\n")
    assert found == cgroups.Cgroups(2, dict.fromkeys(("memory", "pids", "cpu"),
                                                      f"{tmp_path}/grading/course-grader"))
    at_root = cgroups.detect(_v2_machine(tmp_path / "host", "/", delegated=""), "0::/\n")
    assert at_root.folders["memory"] == f"{tmp_path}/host/course-grader"


def test_where_cgroup_v2_cannot_be_used_it_says_why(tmp_path):
    found = cgroups.detect(_v2_machine(tmp_path / "a", "/grading/grader", delegated="cpu"),
                           "0::/grading/grader\n")
    assert "grading does not hand memory, pids and cpu to the cgroups below it" in found.reason
    # a container's cgroup namespace: its root holds processes, unlike the machine's own root
    _v2_machine(tmp_path / "b", "/")
    (tmp_path / "b" / "memory.max").write_text("max\n")
    found = cgroups.detect(_mountinfo(("cgroup2", "/", tmp_path / "b", "rw")), "0::/\n")
    assert "root of a cgroup namespace" in found.reason and not found.version


def test_without_cgroups_or_with_unreadable_ones_detection_says_why_and_never_raises(tmp_path):
    nothing = cgroups.detect("31 23 0:28 / /sys rw - sysfs sysfs rw\n", "0::/\n")
    assert nothing.reason == "no cgroup hierarchy with the memory, pids and cpu controllers is mounted"
    garbled = cgroups.detect(_v1_machine(tmp_path), "garbage")
    assert garbled.reason.startswith("this process's cgroups cannot be read")
    gone = cgroups.detect(_mountinfo(("cgroup2", "/", tmp_path / "gone", "rw")), "0::/\n")
    assert gone.reason.startswith("this process's cgroups cannot be read") and "gone" in gone.reason


def _slot(folder, *files):
    """A slot cgroup as the kernel makes it: its process list, and ``files``."""
    folder.mkdir(parents=True)
    for name in ("cgroup.procs", *files):
        (folder / name).write_text("")


def test_entering_a_v1_slot_writes_its_limits_and_moves_this_process(tmp_path):
    found = cgroups.Cgroups(1, {name: str(tmp_path / name / "course-grader")
                                for name in ("memory", "pids", "cpu")})
    _slot(tmp_path / "memory/course-grader/slot-7", "memory.memsw.limit_in_bytes")
    _slot(tmp_path / "pids/course-grader/slot-7")
    _slot(tmp_path / "cpu/course-grader/slot-7")
    cgroups.enter(found, 7, memory_bytes=4 * GIB, processes=256, cores=2)
    written = {str(f.relative_to(tmp_path)): f.read_text() for f in sorted(tmp_path.rglob("*.*"))}
    assert written == {
        "memory/course-grader/slot-7/cgroup.procs": str(os.getpid()),
        "memory/course-grader/slot-7/memory.limit_in_bytes": str(4 * GIB),
        "memory/course-grader/slot-7/memory.memsw.limit_in_bytes": str(4 * GIB),
        "pids/course-grader/slot-7/cgroup.procs": str(os.getpid()),
        "pids/course-grader/slot-7/pids.max": "256",
        "cpu/course-grader/slot-7/cgroup.procs": str(os.getpid()),
        "cpu/course-grader/slot-7/cpu.cfs_period_us": "100000",
        "cpu/course-grader/slot-7/cpu.cfs_quota_us": "200000",
    }


def test_entering_a_v2_slot_hands_the_controllers_down_first(tmp_path):
    found = cgroups.Cgroups(2, dict.fromkeys(("memory", "pids", "cpu"), str(tmp_path / "course-grader")))
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    (tmp_path / "course-grader").mkdir()
    (tmp_path / "course-grader" / "cgroup.subtree_control").write_text("")
    _slot(tmp_path / "course-grader" / "slot-0")
    cgroups.enter(found, 0, memory_bytes=GIB, processes=64, cores=1)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu +pids"
    assert (tmp_path / "course-grader" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    slot = tmp_path / "course-grader" / "slot-0"
    assert {f.name: f.read_text() for f in slot.iterdir()} == {
        "cgroup.procs": str(os.getpid()), "memory.max": str(GIB), "pids.max": "64",
        "cpu.max": "100000 100000"}  # no memory.swap.max: this kernel has no swap to limit


def test_protections_name_the_limits_in_force(tmp_path):
    limits = Limits(memory_bytes=4 * GIB, threads=2)
    with_cgroups = Policy("root", limits, cgroups=cgroups.Cgroups(1, {"memory": str(tmp_path)}))
    assert with_cgroups.protections()[-2:] == [
        "cgroup v1 per kernel: memory 4.0 GiB incl. children and tmpfs, 256 processes, 2 cores",
        "per-process rlimits too: 4.0 GiB address space, 256 processes per user, 256 MiB per file, "
        "1800 s CPU"]
    without = Policy("root", limits, cgroups=cgroups.Cgroups(reason="/sys/fs/cgroup/pids is not writable"))
    assert without.protections()[-2:] == [
        "no cgroup per kernel: /sys/fs/cgroup/pids is not writable",
        "per-process rlimits only: 4.0 GiB address space, 256 processes per user, 256 MiB per file, "
        "1800 s CPU"]


def test_the_kernelspec_carries_the_cgroups_the_parent_found(tmp_path):
    """The launcher makes the cgroups the parent reported (``Protections: …``), not others."""
    found = cgroups.Cgroups(1, {"memory": "/m", "pids": "/p", "cpu": "/c"})
    policy = Policy("userns", Limits(memory_bytes=GIB), font_list="fonts.json", cgroups=found)
    spec = json.loads((write_kernelspec(tmp_path, policy) / "kernel.json").read_text())
    assert policy_of(json.loads(spec["env"][POLICY_ENV])) == policy


def test_a_kernel_the_machine_refuses_a_cgroup_still_starts_and_the_log_says_why(tmp_path, capsys):
    missing = cgroups.Cgroups(1, dict.fromkeys(("memory", "pids", "cpu"), str(tmp_path / "gone" / "g")))
    _join_cgroup(Policy("root", Limits(memory_bytes=GIB), cgroups=missing), 3)
    error = capsys.readouterr().err
    assert error.startswith("course sandbox: this kernel has no cgroup of its own, only the "
                            "per-process limits: [Errno 2] No such file or directory") and "gone" in error
