"""The tests' tiers: markers name what a test costs, and the fast tier refuses any process start."""

import _posixsubprocess
import multiprocessing
import os
import re
import subprocess
import sys
import tomllib

import pytest
from process_guard import ProcessGuard

from graders.lessons import ROOT

COST_MARKERS = {"kernel", "subprocess", "torchrun", "dask", "classroom", "browser"}


def _entry_points() -> tuple:
    """Every way a test could start a process."""
    return (subprocess._fork_exec, _posixsubprocess.fork_exec, os.posix_spawn, os.posix_spawnp,
            os.fork, os.forkpty, os.system, multiprocessing.process.BaseProcess.start)


def _started_by(module: str, code: str):
    """Run ``code`` as if written in ``module`` (the guard names the marker from who starts what)."""
    exec(compile(code, f"<{module}>", "exec"), {"__name__": module, "subprocess": subprocess, "os": os,
                                                "sys": sys, "multiprocessing": multiprocessing})


@pytest.mark.parametrize(("module", "code", "marker"), [
    ("tests.anything", "subprocess.run(['true'])", "subprocess"),
    ("tests.anything", "subprocess.run([sys.executable, '-m', 'torch.distributed.run', 'x.py'])", "torchrun"),
    ("jupyter_client.launcher", "subprocess.Popen(['python', '-m', 'ipykernel_launcher'])", "kernel"),
    ("tests.anything", "subprocess.run([sys.executable, '-m', 'papermill', 'a.ipynb'])", "kernel"),
    ("distributed.nanny", "multiprocessing.get_context('spawn').Process(target=print).start()", "dask"),
    ("graders.grade.classroom", "subprocess.Popen(['bwrap'])", "classroom"),
    ("tests.anything", "os.system('true')", "subprocess"),
    ("tests.anything", "os.fork()", "subprocess"),
], ids=["subprocess", "torchrun", "kernel", "papermill", "dask", "classroom", "os.system", "os.fork"])
def test_every_way_of_starting_a_process_is_refused_and_names_its_marker(module, code, marker):
    before = _entry_points()
    with ProcessGuard() as guard:
        # (every entry point guarded before any is tried: an unguarded os.fork would fork pytest)
        assert not any(now is then for now, then in zip(_entry_points(), before, strict=True))
        with pytest.raises(RuntimeError, match=f"mark the test @pytest.mark.{marker} "):
            _started_by(module, code)
    assert len(guard.refused) == 1 and f"@pytest.mark.{marker} " in guard.refused[0]
    assert _entry_points() == before  # and all of them put back


def test_every_cost_marker_is_registered_and_left_out_of_the_fast_tier():
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in settings["addopts"].split()
    registered = {line.split(":")[0] for line in settings["markers"]}
    assert COST_MARKERS | {"second_edition"} <= registered
    makefile = (ROOT / "Makefile").read_text()
    fast_tier = re.search(r"^FAST_TIER := (.+)$", makefile, re.M)[1]
    assert set(re.findall(r"\w+", fast_tier)) - {"not", "or", "and"} == COST_MARKERS | {"second_edition"}
    recipe = makefile.split("\ntest-fast:", 1)[1].split("\n\n")[0]
    assert '-m "$(FAST_TIER)" --no-processes' in recipe
