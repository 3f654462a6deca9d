"""A cgroup per grading kernel: memory (its children and its tmpfs included), process count and CPU.

setrlimit bounds each process (address space) or each user (processes): a kernel whose children
each stay under those limits can still exhaust the machine together. A cgroup bounds the whole tree.
The sandbox's launcher joins its worker slot's cgroup just before it becomes bubblewrap
(:func:`enter`), so the kernel and everything it starts are in it; a slot runs one kernel at a time,
so per slot is per kernel. Past the memory limit, the kernel's OOM killer chooses inside that cgroup
only, and the grader sees a dead kernel, as after any crash.

Where the slot cgroups ``course-grader/slot-<N>`` are made (:func:`detect` finds it):

- cgroup v1 (a hierarchy per controller, as on these machines): under this process's own cgroup in
  each of the memory, pids and cpu hierarchies.
- cgroup v2 (one hierarchy): beside this process's own cgroup, in its parent (at the root, where it
  is the root), since v2 gives no controller to cgroups below one that holds processes, as ours does.

Slot cgroups are kept and reused: what a killed grader left running in one is killed when that
slot's next kernel starts, before the new one joins. Where cgroups cannot be made here (not root,
mounted read-only, none mounted), :func:`detect` says why, and the rlimits alone apply.

The course's JupyterHub makes its users' cgroups the same way, in a group of their own
(``detect(group=...)``, :func:`prepare` and :func:`join` with the user's name): a user's server and
everything it starts share that user's limits (:mod:`graders.hub.limits`).
"""

import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

CONTROLLERS = ("memory", "pids", "cpu")
GROUP = "course-grader"
PERIOD_US = 100_000  # the CFS period of a kernel's CPU quota: the kernel's default


@dataclass(frozen=True)
class Cgroups:
    """Where the slot cgroups are made: ``version`` 1 or 2 and, per controller, the folder that holds
    them; or ``version`` 0 and the ``reason`` there are none."""

    version: int = 0
    folders: dict[str, str] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class Mount:
    """One cgroup hierarchy mounted here: the cgroup at its ``root``, shown at ``point``."""

    fstype: str
    root: str
    point: Path
    read_only: bool
    controllers: frozenset[str]


def detect(mountinfo: str | None = None, own: str | None = None, group: str = GROUP) -> Cgroups:
    """Where this process may make per-kernel cgroups (in ``group``), from ``/proc/self/mountinfo``
    and ``/proc/self/cgroup`` (or the texts given); it only reads, and never raises."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
        own = Path("/proc/self/cgroup").read_text() if own is None else own
        mounts, paths = parse_mounts(mountinfo), parse_own(own)
        unified = [m for m in mounts if m.fstype == "cgroup2" and _offers_all(m)]
        if unified:
            return _v2(unified[0], paths, group)
        if any(m.fstype == "cgroup" for m in mounts):
            return _v1(mounts, paths, group)
    except (OSError, ValueError) as error:
        return Cgroups(reason=f"this process's cgroups cannot be read ({error})")
    return Cgroups(reason="no cgroup hierarchy with the memory, pids and cpu controllers is mounted")


def parse_mounts(mountinfo: str) -> list[Mount]:
    """The cgroup hierarchies of a ``/proc/self/mountinfo`` text (see proc(5))."""
    mounts = []
    for line in mountinfo.splitlines():
        fields, _, after = line.partition(" - ")
        fields, after = fields.split(), after.split()
        if len(fields) < 6 or len(after) < 3 or after[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(Mount(after[0], _unescape(fields[3]), Path(_unescape(fields[4])),
                            "ro" in fields[5].split(","),
                            frozenset(after[2].split(",")) & set(CONTROLLERS)))
    return mounts


def _unescape(text: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as an octal escape."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match[1], 8)), text)


def parse_own(text: str) -> dict[str, str]:
    """This process's cgroup per controller from a ``/proc/self/cgroup`` text; cgroup v2's under ``""``."""
    paths = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _offers_all(mount: Mount) -> bool:
    """Whether a v2 hierarchy has all the controllers (a v1 machine mounts one holding none)."""
    available = (mount.point / "cgroup.controllers").read_text().split()
    return set(CONTROLLERS) <= set(available)


def _folder(mount: Mount, path: str) -> Path:
    """Where the cgroup ``path`` shows under ``mount`` (a container may mount only its own part)."""
    relative = PurePosixPath(path).relative_to(mount.root)  # ValueError where it is not in view
    return mount.point / relative


def _refusal(mount: Mount, folder: Path) -> str:
    """Why no cgroup can be made in ``folder``, or ``""``."""
    if mount.read_only:
        return f"{mount.point} is mounted read-only (remount it read-write to give each kernel a cgroup)"
    if not folder.is_dir():
        return f"{folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"{folder} is not writable (grade as root, or from a cgroup delegated to you)"
    return ""


def _v1(mounts: list[Mount], paths: dict[str, str], group: str) -> Cgroups:
    folders = {}
    for name in CONTROLLERS:
        mount = next((m for m in mounts if m.fstype == "cgroup" and name in m.controllers), None)
        if mount is None or name not in paths:
            return Cgroups(reason=f"cgroup v1 without the {name} controller")
        folder = _folder(mount, paths[name])
        if refusal := _refusal(mount, folder):
            return Cgroups(reason=f"cgroup v1: {refusal}")
        folders[name] = str(folder / group)
    return Cgroups(1, folders)


def _v2(mount: Mount, paths: dict[str, str], group: str) -> Cgroups:
    own = _folder(mount, paths[""])
    if own == mount.point and (own / "memory.max").exists():
        # only the machine's real root has no memory.max, and only it may hold processes and
        # still hand controllers down
        return Cgroups(reason=f"cgroup v2: the grader runs in the root of a cgroup namespace ({own}), "
                              "whose processes keep its controllers from the cgroups below it; start "
                              "the grader in a cgroup of its own below that root, or outside the container")
    base = own if own == mount.point else own.parent
    if base != mount.point:  # the root's controllers are handed down as its slots are made
        delegated = (base / "cgroup.subtree_control").read_text().split()
        if not set(CONTROLLERS) <= set(delegated):
            return Cgroups(reason=f"cgroup v2: {base} does not hand memory, pids and cpu to the cgroups "
                                  f"below it (its cgroup.subtree_control: {' '.join(delegated) or 'none'})")
    if refusal := _refusal(mount, base):
        return Cgroups(reason=f"cgroup v2: {refusal}")
    return Cgroups(2, {name: str(base / group) for name in CONTROLLERS})


def folders_of(cgroups: Cgroups, name: str) -> dict[str, Path]:
    """The cgroup ``name`` of the group in each controller's hierarchy (one folder for v2)."""
    return {controller: Path(folder) / name for controller, folder in cgroups.folders.items()}


def slot_folders(cgroups: Cgroups, slot: int) -> dict[str, Path]:
    """The cgroup of worker slot ``slot`` in each controller's hierarchy (one folder for v2)."""
    return folders_of(cgroups, f"slot-{slot}")


def limit_files(version: int, memory_bytes: int, processes: int, cores: float) -> dict[str, list[tuple]]:
    """What to write in a slot cgroup, per controller: (file, value) pairs, in order."""
    quota = int(cores * PERIOD_US)
    if version == 1:
        # memsw must never be below the memory limit: lifted first, then set to it (no swap either)
        return {"memory": [("memory.memsw.limit_in_bytes", -1), ("memory.limit_in_bytes", memory_bytes),
                           ("memory.memsw.limit_in_bytes", memory_bytes)],
                "pids": [("pids.max", processes)],
                "cpu": [("cpu.cfs_period_us", PERIOD_US), ("cpu.cfs_quota_us", quota)]}
    return {"memory": [("memory.max", memory_bytes), ("memory.swap.max", 0)],
            "pids": [("pids.max", processes)], "cpu": [("cpu.max", f"{quota} {PERIOD_US}")]}


# Swap's limits, which exist only where the kernel accounts swap: without them there is none to limit.
SWAP_FILES = ("memory.memsw.limit_in_bytes", "memory.swap.max")


def enter(cgroups: Cgroups, slot: int, memory_bytes: int, processes: int, cores: int) -> None:
    """Put this process in the cgroups of worker slot ``slot``, with these limits, after killing
    what an earlier kernel of the slot left there; raises OSError where the kernel refuses."""
    join(prepare(cgroups, f"slot-{slot}", memory_bytes, processes, cores))


def prepare(cgroups: Cgroups, name: str, memory_bytes: int, processes: int, cores: float) -> dict[str, Path]:
    """The cgroup ``name``, made where missing, emptied of what an earlier user of it left running,
    with these limits; its folder per controller. Raises OSError where the kernel refuses."""
    folders = folders_of(cgroups, name)
    for folder in set(folders.values()):
        folder.parent.mkdir(exist_ok=True)
        if cgroups.version == 2:
            _hand_down(folder.parent.parent)
            _hand_down(folder.parent)
        folder.mkdir(exist_ok=True)
        _kill_all(folder)
    for controller, writes in limit_files(cgroups.version, memory_bytes, processes, cores).items():
        for file, value in writes:
            if file not in SWAP_FILES or (folders[controller] / file).exists():
                (folders[controller] / file).write_text(str(value))
    return folders


def join(folders: dict[str, Path]) -> None:
    """Move this process (and so all it starts from now on) into the cgroup of ``folders``."""
    for folder in set(folders.values()):
        (folder / "cgroup.procs").write_text(str(os.getpid()))


def remove(folders: dict[str, Path], wait_s: float = 5) -> None:
    """Kill what still runs in the cgroup of ``folders`` and remove it, once the killed have left it
    (up to ``wait_s``); raises OSError where it cannot be removed."""
    deadline = time.monotonic() + wait_s
    for folder in set(folders.values()):
        _kill_all(folder)
        while (folder / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        folder.rmdir()


def _hand_down(folder: Path) -> None:
    """cgroup v2: let the cgroups below ``folder`` have memory, pids and cpu of their own."""
    control = folder / "cgroup.subtree_control"
    missing = set(CONTROLLERS) - set(control.read_text().split())
    if missing:
        control.write_text(" ".join(f"+{name}" for name in sorted(missing)))


def _kill_all(folder: Path) -> None:
    """SIGKILL to every process in the cgroup ``folder``: the slot is this grader's, so whatever
    runs there is left from a kernel of the slot that outlived its grader."""
    for pid in map(int, (folder / "cgroup.procs").read_text().split()):
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
