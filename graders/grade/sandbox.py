"""Run a student's kernel in a sandbox (bubblewrap), and say plainly which protections are active.

As root, the kernel runs as an unprivileged user of its own worker slot (uid 65000 + slot, a user
no account holds) after bubblewrap has built its view of the filesystem: limits that the kernel
counts per user (processes and threads) then hold for each kernel on its own, so one submission
that exhausts them cannot starve the kernel graded beside it. Without root it runs as the invoking
user inside a user namespace, where those per-user limits are shared by every kernel. In both modes it has
its own network namespace (no network), its own pid namespace, a filesystem made of read-only
binds (the system, the interpreter, the course's helper packages) plus a private, size-limited
home, and resource limits on memory, processes, file size and CPU time: per process (setrlimit)
always, and per kernel, its children and its home included, where the machine lets the grader make
cgroups (:mod:`graders.grade.cgroups`). ``solutions/``, the gradebook and other students' files are
simply not in its view.

The kernelspec starts ``python -m graders.grade.sandbox <connection_file>``: this launcher joins its
slot's cgroup, applies the limits, derives the socket folder from the connection file, and replaces
itself with bubblewrap.
"""

import dataclasses
import fcntl
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from graders.grade import cgroups as kernel_cgroups
from graders.kernel_startup import STARTUP

KERNEL_NAME = "course-sandbox"
# Unprivileged uids, one per worker slot: Debian reserves 65000-65533 and gives them to no one.
FIRST_UID = 65000
MAX_SLOTS = 500
SLOT_ENV = "COURSE_SANDBOX_SLOT"
# Slots are claimed machine-wide with lock files, so that two grading runs at once never share a
# sandbox user: local worker pools take them from LOCAL_SLOTS, Dask workers from above. Root's graders
# claim them in SLOTS_FOLDER, which only root creates and only graders may enter (see slots_folder).
SLOTS_DIR = "course-grader-slots"
SLOTS_FOLDER = Path("/run") / SLOTS_DIR
LOCAL_SLOTS = range(0, 250)
MAX_SOCKET_PATH = 107  # sockaddr_un.sun_path on Linux, less its final NUL


class NoFreeSlot(RuntimeError):
    """Every grading slot of this machine is held by a running grader."""
GIB = 1024**3
POLICY_ENV = "COURSE_SANDBOX_POLICY"


@dataclass(frozen=True)
class Limits:
    """A kernel's resource limits. Each process's address space is at most ``memory_bytes`` (an
    allocation past it fails), and each sandbox user's processes and threads ``processes``
    (setrlimit). Where the kernel has a cgroup, ``memory_bytes`` also bounds the memory of the whole
    kernel, its children and tmpfs included, ``processes`` its processes and threads, and
    ``threads`` the cores it may use (:mod:`graders.grade.cgroups`)."""

    memory_bytes: int
    processes: int = 256
    file_bytes: int = 256 * 1024**2
    cpu_seconds: int = 1800
    home_bytes: int = 512 * 1024**2
    threads: int = 1

    @staticmethod
    def for_workers(workers: int, total_memory: int | None = None) -> "Limits":
        """Three quarters of the memory and all the cores, shared by the workers (4 GiB at least)."""
        total = total_memory or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        workers = max(1, workers)
        return Limits(memory_bytes=max(4 * GIB, int(total * 0.75) // workers),
                      threads=max(1, (os.cpu_count() or 1) // workers))


@dataclass(frozen=True)
class Policy:
    """How kernels are isolated here: ``root`` (switch to nobody), ``userns`` or ``none``;
    ``font_list``, matplotlib's list of the fonts in the sandbox's view (see :func:`build_font_list`),
    put read-only in each kernel's home so that no kernel spends its start building its own; and
    ``cgroups``, where each kernel gets a cgroup of its own, found on this machine unless given."""

    mode: str
    limits: Limits
    font_list: str = ""
    cgroups: kernel_cgroups.Cgroups = field(default_factory=kernel_cgroups.detect)

    def protections(self) -> list[str]:
        """What this policy really enforces, in words an instructor can check."""
        if self.mode == "none":
            return ["NO SANDBOX: bubblewrap is missing; student code runs with your rights, "
                    "without limits on memory, processes or CPU"]
        who = (f"an unprivileged user of its own per worker (uid {FIRST_UID} + worker slot)"
               if self.mode == "root" else
               "your own user inside a user namespace (no root to switch users: the process "
               "limit is shared by all kernels)")
        return [
            f"runs as {who}",
            "no network (own network namespace)",
            "own pid namespace; killed with the grader",
            "filesystem: read-only system, interpreter and course helpers; no solutions/, "
            "gradebook or other submissions in view",
            f"private home of {self.limits.home_bytes // 1024**2} MiB in memory, gone after the run",
            *self._limits(),
        ]

    def _limits(self) -> list[str]:
        """The limits in force: per kernel where it has a cgroup, and per process always."""
        limits = self.limits
        per_process = (f"{limits.memory_bytes / GIB:.1f} GiB address space, {limits.processes} "
                       f"processes per user, {limits.file_bytes // 1024**2} MiB per file, "
                       f"{limits.cpu_seconds} s CPU")
        if not self.cgroups.version:
            return [f"no cgroup per kernel: {self.cgroups.reason}",
                    f"per-process rlimits only: {per_process}"]
        cores = f"{limits.threads} core{'s' if limits.threads > 1 else ''}"
        return [f"cgroup v{self.cgroups.version} per kernel: memory {limits.memory_bytes / GIB:.1f} GiB "
                f"incl. children and tmpfs, {limits.processes} processes, {cores}",
                f"per-process rlimits too: {per_process}"]


def detect_mode() -> str:
    """``root`` as root with bubblewrap, ``userns`` without root, ``none`` without bubblewrap."""
    if not shutil.which("bwrap"):
        return "none"
    if os.geteuid() == 0 and shutil.which("setpriv"):
        return "root"
    return "userns"


def _readable_roots() -> list[Path]:
    """The folders a kernel needs to read: interpreter, venv, and the course's helper packages."""
    from graders.lessons import ROOT

    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parents[1],
             ROOT / "course", ROOT / "graders", ROOT / "data"}
    return sorted(p for p in roots if p.exists() and not str(p).startswith("/usr"))


def _in_view(path: str) -> bool:
    """Whether a kernel in the sandbox sees the file ``path`` (a relative one is matplotlib's own)."""
    if not os.path.isabs(path):
        return True
    return any(path.startswith(f"{root}/") for root in ["/usr", "/etc", *map(str, _readable_roots())])


def build_font_list(folder: Path) -> Path | None:
    """matplotlib's font list (``fontlist-v*.json``) as a kernel in the sandbox would build it, in
    ``folder``; ``None`` where it cannot be built here or names a font the sandbox does not show
    (a kernel then builds its own, as it would without it)."""
    folder = Path(folder)
    home = folder / "home"  # an empty home, like the sandbox's: no fonts of the grader's own user
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MPLCONFIGDIR": str(folder), "HOME": str(home)}
    try:
        subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env,
                       capture_output=True, check=True, timeout=300)
        path = next(folder.glob("fontlist-v*.json"))
        data = json.loads(path.read_text())
        names = [font["fname"] for font in data["ttflist"] + data["afmlist"]]
    except (OSError, ValueError, KeyError, StopIteration, subprocess.SubprocessError):
        return None
    return path if all(_in_view(name) for name in names) else None


def _parents(path: Path) -> list[Path]:
    return [p for p in reversed(path.parents) if str(p) != "/"]


def slots_folder() -> Path:
    """Where this user's graders claim their slots: a folder no other account can enter, since whoever
    can open a lock file can hold it (a read-only ``flock`` is enough) and so stop grading.

    Root's: :data:`SLOTS_FOLDER`, made by root (mode 700) under ``/run``, where nobody else can make
    anything; the course's JupyterHub opens it to its instructors' group, whose graders then take
    their slots there too (``course hub serve``). Any other user's, where they cannot write that one:
    a folder of their own in the temporary folder (mode 700). Their kernels run as themselves, in no
    cgroup of the machine's, so they share nothing a slot guards with other users' graders."""
    if os.geteuid() == 0 and SLOTS_FOLDER.parent.is_dir():
        SLOTS_FOLDER.mkdir(mode=0o700, exist_ok=True)
        return SLOTS_FOLDER
    if os.access(SLOTS_FOLDER, os.W_OK | os.X_OK):
        return SLOTS_FOLDER
    own = Path(tempfile.gettempdir()) / f"{SLOTS_DIR}-{os.geteuid()}"
    own.mkdir(mode=0o700, exist_ok=True)
    found = own.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
        raise PermissionError(f"{own}, where your grading slots are kept, is not yours alone (owner uid "
                              f"{found.st_uid}, mode {stat.S_IMODE(found.st_mode):o}): another account "
                              f"could hold them; remove it (as root: rm -rf {own}), or set TMPDIR to a "
                              "folder of your own")
    return own


def _lock_file(path: Path):
    """The lock file at ``path``, opened read-only (enough for ``flock``), made first where missing.
    An existing one is opened without O_CREAT: the kernel's ``protected_regular`` refuses that even to
    root on a file of someone else's in a shared folder."""
    while True:
        try:
            return os.fdopen(os.open(path, os.O_RDONLY), "rb")
        except FileNotFoundError:
            pass
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o640)
        except FileExistsError:  # another grader made it in between: open theirs
            continue
        os.fchmod(descriptor, 0o640)  # the graders' group reads it, whatever this process's umask
        return os.fdopen(descriptor, "rb")


def claim_slot(slots: range, folder: Path | None = None) -> tuple[int, object]:
    """The lowest slot number no other holder on this machine has locked; keep the handle open to
    keep it (the lock goes with the handle, or with the process). ``folder``: where the locks are,
    :func:`slots_folder` unless given."""
    folder = Path(folder or slots_folder())
    for number in slots:
        handle = _lock_file(folder / f"{number}.lock")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return number, handle
    raise NoFreeSlot(f"all {len(slots)} grading slots of this machine are taken by running graders: "
                     "grade with fewer workers, or wait for the other runs to end")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def socket_root() -> Path:
    """A short folder for kernel sockets (unix socket paths stay under ~100 bytes, whatever the
    class folder and student names); what killed grading runs left there is removed first."""
    for stale in Path(tempfile.gettempdir()).glob("course-grader-*-*"):
        pid = stale.name.split("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"course-grader-{os.getpid()}-"))


def use_unix_sockets(km, folder: Path) -> None:
    """Have the kernel manager ``km`` start its kernel on unix sockets in ``folder`` (jupyter's
    ``ipc`` transport): no TCP port is opened, so the kernel has no plain-text traffic to warn about.
    A fresh folder per kernel: a restarted kernel never meets the sockets of a dead one."""
    km.transport = "ipc"
    km.connection_file = str(Path(folder) / "connection.json")
    km.ip = str(Path(folder) / "socket")
    if len(f"{km.ip}-65535") > MAX_SOCKET_PATH:
        raise ValueError(f"the kernel's socket path {km.ip!r} is too long for a unix socket "
                         f"({MAX_SOCKET_PATH} bytes at most): set TMPDIR to a short folder")


def slot_uid(slot: int) -> int:
    """The sandbox user of a worker slot; refuses a uid that belongs to an account here."""
    import pwd

    if not 0 <= slot < MAX_SLOTS:
        raise ValueError(f"worker slot {slot} is outside 0..{MAX_SLOTS - 1}")
    uid = FIRST_UID + slot
    try:
        account = pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid
    raise RuntimeError(f"uid {uid} belongs to the account {account!r}: the sandbox needs uids "
                       f"{FIRST_UID}-{FIRST_UID + MAX_SLOTS - 1} unused; remove that account or use "
                       "fewer workers")


def bwrap_command(policy: Policy, socket_dir: Path, argv: list[str], uid: int | None = None) -> list[str]:
    """The bubblewrap command line that runs ``argv`` inside the sandbox."""
    home = Path("/home/student")
    command = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if policy.mode == "userns":
        command += ["--unshare-user"]
    command += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
                "--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", str(policy.limits.home_bytes), "--tmpfs", "/tmp"]
    for name in ("lib", "lib64", "bin", "sbin"):
        if os.path.islink(f"/{name}"):
            command += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
        elif os.path.isdir(f"/{name}"):
            command += ["--ro-bind", f"/{name}", f"/{name}"]
    created = {Path("/tmp")}
    for folder in [*_readable_roots(), socket_dir]:
        for parent in _parents(folder):
            if parent not in created and not str(parent).startswith("/usr"):
                command += ["--perms", "0755", "--dir", str(parent)]
                created.add(parent)
    for folder in _readable_roots():
        command += ["--ro-bind", str(folder), str(folder)]
    command += ["--bind", str(socket_dir), str(socket_dir),
                "--perms", "1777", "--size", str(policy.limits.home_bytes), "--tmpfs", str(home)]
    if policy.font_list and os.path.isfile(policy.font_list):
        # matplotlib wants its folder writable; the list itself stays read-only
        fonts = home / ".matplotlib" / Path(policy.font_list).name
        command += ["--perms", "1777", "--dir", str(fonts.parent),
                    "--ro-bind", policy.font_list, str(fonts)]
    command += ["--chdir", str(home), "--clearenv",
                "--setenv", "HOME", str(home),
                "--setenv", "PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin",
                "--setenv", "LANG", "C.UTF-8", "--setenv", "MPLCONFIGDIR", f"{home}/.matplotlib",
                "--setenv", "MPLBACKEND", "module://matplotlib_inline.backend_inline"]
    # Workers share the cores: more threads per kernel than that only adds contention.
    command += ["--setenv", "OMP_NUM_THREADS", str(policy.limits.threads)]
    # the lesson's settings only: who submitted and who is in the class stay with the judge
    for name in ("COURSE_FAST", "COURSE_DEVICE", "COURSE_DATA_DIR"):
        if name in os.environ:
            command += ["--setenv", name, os.environ[name]]
    if policy.mode == "root":
        command += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--no-new-privs"]
    return command + argv


def _apply_limits(limits: Limits) -> None:
    # No core files: a crashing kernel would spend minutes writing gigabytes of address space.
    for name, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_AS, limits.memory_bytes),
                        (resource.RLIMIT_NPROC, limits.processes),
                        (resource.RLIMIT_FSIZE, limits.file_bytes),
                        (resource.RLIMIT_CPU, limits.cpu_seconds)):
        resource.setrlimit(name, (value, value))


def kernel_argv(connection_file: str) -> list[str]:
    return [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file,
            "--HistoryManager.hist_file=:memory:", f"--IPKernelApp.exec_lines={STARTUP}"]


def write_kernelspec(kernels_dir: Path, policy: Policy) -> Path:
    """Install the sandbox kernelspec under ``kernels_dir/course-sandbox/`` (for JUPYTER_PATH),
    with matplotlib's font list built once for all its kernels."""
    folder = Path(kernels_dir) / KERNEL_NAME
    folder.mkdir(parents=True, exist_ok=True)
    if policy.mode != "none" and not policy.font_list:
        font_list = build_font_list(folder / "matplotlib")
        policy = dataclasses.replace(policy, font_list=str(font_list or ""))
    spec = {
        "argv": [sys.executable, "-m", "graders.grade.sandbox", "{connection_file}"],
        "display_name": "Course sandbox",
        "language": "python",
        # SIGINT sent to bubblewrap never reaches the kernel: interrupt through a message.
        "interrupt_mode": "message",
        "env": {POLICY_ENV: json.dumps({"mode": policy.mode, "limits": asdict(policy.limits),
                                        "font_list": policy.font_list,
                                        "cgroups": asdict(policy.cgroups)})},
    }
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1))
    return folder


def policy_of(raw: dict) -> Policy:
    """The policy a kernelspec carries (:func:`write_kernelspec`), as the parent found it."""
    return Policy(raw["mode"], Limits(**raw["limits"]), raw.get("font_list", ""),
                  kernel_cgroups.Cgroups(**raw["cgroups"]))


def _join_cgroup(policy: Policy, slot: int) -> None:
    """Put this launcher, and so the kernel it becomes, in its slot's cgroup, where the policy has
    them; where the machine refuses, the kernel still runs, with the per-process limits, and the
    worker's log says why."""
    if not policy.cgroups.version:
        return
    limits = policy.limits
    try:
        kernel_cgroups.enter(policy.cgroups, slot, limits.memory_bytes, limits.processes, limits.threads)
    except OSError as error:
        print(f"course sandbox: this kernel has no cgroup of its own, only the per-process limits: "
              f"{error}", file=sys.stderr, flush=True)


def launch(connection_file: str) -> None:
    """Join the slot's cgroup, apply the limits and replace this process with the sandboxed kernel."""
    policy = policy_of(json.loads(os.environ[POLICY_ENV]))
    socket_dir = Path(connection_file).resolve().parent
    slot = int(os.environ.get(SLOT_ENV, "0"))
    uid = slot_uid(slot) if policy.mode == "root" else None
    if uid is not None:
        os.chown(socket_dir, uid, uid)
        os.chown(connection_file, uid, uid)
    argv = kernel_argv(connection_file)
    command = argv if policy.mode == "none" else bwrap_command(policy, socket_dir, argv, uid)
    _join_cgroup(policy, slot)
    _apply_limits(policy.limits)
    os.execvp(command[0], command)


if __name__ == "__main__":
    launch(sys.argv[1])
