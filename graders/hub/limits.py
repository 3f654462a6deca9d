"""What one user's server may take of the hub's machine: memory, CPU, processes, and time left idle.

JupyterHub's own settings say it (``Spawner.mem_limit``, ``Spawner.cpu_limit``), and the spawner
enforces them over the server and everything it starts (kernels, terminals, their children):

- where systemd runs, JupyterHub's systemd spawner makes each server a unit with ``MemoryMax``,
  ``CPUQuota`` and ``TasksMax``, as The Littlest JupyterHub does;
- elsewhere (a container, a machine without systemd), or where asked (``--spawner cgroups``: the
  tests, for the same hub everywhere), :class:`graders.hub.spawner.CgroupSpawner` puts each server in
  a cgroup of its user's, made with the grader's own cgroups code (:mod:`graders.grade.cgroups`).

Past its memory, the kernel's OOM killer stops a process of that user's only (the largest: the
kernel that allocated), never another user's; a systemd unit is then stopped whole (systemd's
default ``OOMPolicy=stop``), a cgroup of the course's keeps the user's JupyterLab running, as a
laptop would. JupyterHub's idle culler (``jupyterhub-idle-culler``,
a hub service) stops the servers nobody has used for a while; it is on by default.
"""

import sys
from pathlib import Path

from graders.grade import cgroups
from graders.hub.exchange import Problem

# The cgroups of the hub's users, beside the grader's slots: <group>/<user>.
USERS_GROUP = "course-hub"
# Processes and threads of one user's server together: far above what JupyterLab and a few torch
# kernels start (a thread per core each), far below what a fork bomb would take from everyone.
USER_PROCESSES = 4096
SPAWNERS = ("auto", "systemd", "cgroups")
CULLER = "idle-culler"
CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]


def systemd_runs() -> bool:
    """Whether systemd is this machine's init (sd_booted(3)'s own test)."""
    return Path("/run/systemd/system").is_dir()


def by_systemd(settings) -> bool:
    """Whether the hub's servers are systemd units (else cgroups of the course's)."""
    return settings.spawner == "systemd" or (settings.spawner == "auto" and systemd_runs())


def configure(c, settings) -> None:
    """The limits and the idle culler in JupyterHub's config ``c``, from the hub's settings."""
    c.Spawner.mem_limit = settings.memory
    c.Spawner.cpu_limit = float(settings.cpus)
    if by_systemd(settings):
        c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
        c.SystemdSpawner.unit_extra_properties = {"TasksMax": str(USER_PROCESSES)}
        c.SystemdSpawner.isolate_tmp = True
    else:
        c.JupyterHub.spawner_class = "graders.hub.spawner.CgroupSpawner"
    if settings.cull_idle_s:
        c.JupyterHub.services.append({"name": CULLER, "command": [
            sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={settings.cull_idle_s}"]})
        c.JupyterHub.load_roles.append({"name": CULLER, "scopes": CULLER_SCOPES, "services": [CULLER]})


def describe(settings) -> str:
    """The limits in force, in one line for the instructor."""
    if by_systemd(settings):
        how = "as systemd units"
    else:
        found = cgroups.detect(group=USERS_GROUP)
        how = f"in cgroups (v{found.version})" if found.version else f"NOT ENFORCED: {found.reason}"
    culler = (f"servers idle for {settings.cull_idle_s} s are stopped" if settings.cull_idle_s
              else "idle servers are never stopped")
    return f"each user's server: {settings.memory} of memory, {settings.cpus:g} CPUs, {how}; {culler}"


def problems(settings) -> list[Problem]:
    """What keeps the limits or the idle culler from holding, each with its fix."""
    found = []
    detected = cgroups.detect(group=USERS_GROUP)
    if not by_systemd(settings) and not detected.version:
        found.append(Problem(Path("/sys/fs/cgroup"), f"users' servers run without limits: {detected.reason}",
                             _cgroups_fix()))
    if not settings.cull_idle_s:
        found.append(Problem(Path(settings.hub_dir), "the idle culler is off: a forgotten server keeps its "
                             "memory until the hub stops", "make hub HUB_CULL=3600"))
    return found


def _cgroups_fix() -> str:
    """The command that lets root make cgroups here: its read-only cgroup mounts remounted."""
    mounts = cgroups.parse_mounts(Path("/proc/self/mountinfo").read_text())
    read_only = [str(mount.point) for mount in mounts
                 if mount.read_only and (mount.fstype == "cgroup2" or mount.controllers)]
    if read_only:
        return " && ".join(f"mount -o remount,rw {point}" for point in read_only)
    return ("run the hub as root where cgroups have the memory, pids and cpu controllers "
            "(docs/instructors/jupyterhub.md#what-keeps-each-account-to-its-own)")
