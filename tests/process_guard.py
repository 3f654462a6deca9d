"""The fast tier's guard: while installed, every way of starting a process is refused, and the refusal
names the cost marker the test lacks (``make test-fast`` installs it around every test)."""

import _posixsubprocess
import multiprocessing.process
import os
import subprocess
import sys


def _marker_for(what: str) -> str:
    """The cost marker a process start needs, from who started it (the calling modules) and what."""
    modules, frame = [], sys._getframe(2)
    while frame is not None:
        modules.append(frame.f_globals.get("__name__", ""))
        frame = frame.f_back
    starters = " ".join(modules)
    if "graders.grade.classroom" in starters or "graders.cli" in what and " grade " in what:
        return "classroom"
    if "torchrun" in what or "torch.distributed" in what or "torch.distributed" in starters or \
            "torch.multiprocessing" in starters:
        return "torchrun"
    if any(name == "distributed" or name.startswith(("distributed.", "dask.")) for name in modules):
        return "dask"
    if "playwright" in starters or "jupyter-lab" in what or "jupyterlab" in what:
        return "browser"
    if any(name in starters for name in ("jupyter_client", "nbclient", "papermill")) or \
            any(name in what for name in ("ipykernel", "papermill")):
        return "kernel"
    return "subprocess"


class ProcessGuard:
    """While installed, every way of starting a process records who tried and refuses."""

    def __init__(self):
        self.refused: list[str] = []
        self._saved: list[tuple[object, str, object]] = []

    def _refuse(self, what: str):
        marker = _marker_for(what)
        self.refused.append(f"started {what} in the fast tier: mark the test "
                            f"@pytest.mark.{marker} (or the cost marker that fits, see pyproject.toml)")
        raise RuntimeError(f"make test-fast starts no processes; {self.refused[-1]}")

    def _patch(self, owner, name, describe):
        original = getattr(owner, name, None)
        if original is None:
            return
        guard = self

        def refused(*args, **kwargs):
            guard._refuse(describe(args))
        self._saved.append((owner, name, original))
        setattr(owner, name, refused)

    def install(self):
        argv = lambda args: f"a process `{' '.join(map(os.fsdecode, args[0] or ()))[:200]}`"  # noqa: E731
        self._patch(_posixsubprocess, "fork_exec", argv)  # multiprocessing's spawn and forkserver
        self._patch(subprocess, "_fork_exec", argv)  # subprocess.Popen (its own name for it)
        for name in ("posix_spawn", "posix_spawnp"):
            self._patch(os, name, lambda args: argv((args[1],)))
        for name in ("fork", "forkpty"):
            self._patch(os, name, lambda args, name=name: f"os.{name}()")
        self._patch(os, "system", lambda args: f"a shell `{args[0]}`")
        self._patch(multiprocessing.process.BaseProcess, "start", lambda args: "a multiprocessing Process")
        spec = sys.modules.get("distributed.deploy.spec")
        if spec is not None:  # a cluster whose workers are threads of this process is a cluster too
            self._patch(spec.SpecCluster, "__init__", lambda args: "a Dask cluster")

    def uninstall(self):
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)

    def __enter__(self):
        self.install()
        return self

    def __exit__(self, *_):
        self.uninstall()
