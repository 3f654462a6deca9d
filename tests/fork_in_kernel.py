"""Runs inside a grading kernel (imported by :mod:`forked_kernel`): a forked copy of the kernel runs
other cells, and the kernel itself is left exactly as it was.

The copy runs each cell through the shell as the kernel does (the guard's ``pre_run_cell`` restore
included), and every message the cell would have sent to the notebook (its stream, error,
display and result outputs) is kept instead, as nbformat outputs. The results go to a JSON file
after every cell, so a copy that hangs or dies still reports the cells it finished.
"""

import json
import os
import random
import signal
import sys
import time

_OUTPUTS = ("stream", "error", "execute_result", "display_data")


def _capture_messages(session, captured: list) -> None:
    """Keep what the cells send instead of sending it: the copy shares the kernel's sockets."""
    build = session.msg

    def keep(stream, msg_or_type, content=None, parent=None, ident=None, buffers=None, track=False,
             header=None, metadata=None):
        msg = msg_or_type if isinstance(msg_or_type, dict) else build(
            msg_or_type, content, parent=parent, header=header, metadata=metadata)
        if msg["header"]["msg_type"] in _OUTPUTS:
            captured.append({"msg_type": msg["header"]["msg_type"], "content": msg["content"]})

    session.send = keep


def _timed_out(signum, frame):
    raise TimeoutError("the cell ran past its time limit")


def _run_cells(cells: list[str], result_path: str, cell_timeout: int) -> None:
    if "torch" in sys.modules:  # OpenMP's threads did not come along: one thread, as DataLoader workers
        sys.modules["torch"].set_num_threads(1)
    shell = get_ipython()  # noqa: F821 (the kernel's builtin)
    captured: list = []
    _capture_messages(shell.kernel.session, captured)
    signal.signal(signal.SIGALRM, _timed_out)
    results = []
    for source in cells:
        captured.clear()
        signal.alarm(cell_timeout)
        try:
            shell.run_cell(source, store_history=True)
        finally:
            signal.alarm(0)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        results.append(list(captured))
        with open(result_path + ".part", "w") as out:
            json.dump(results, out, default=repr)
        os.replace(result_path + ".part", result_path)


def run_in_fork(cells: list[str], result_path: str, cell_timeout: int) -> None:
    """Run ``cells`` in a forked copy of this kernel, writing their outputs to ``result_path``.
    A copy that finishes no cell for ``cell_timeout`` seconds and more is killed: stuck in C, it
    never sees its own alarm."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    random_state = random.getstate()
    pid = os.fork()
    if pid == 0:
        try:
            random.setstate(random_state)  # `random` reseeds itself in a forked child
            _run_cells(cells, result_path, cell_timeout)
        finally:
            os._exit(0)  # no exit handler of the kernel's may run in the copy
    finished, last = 0, time.monotonic()
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if os.path.exists(result_path) and os.stat(result_path).st_mtime_ns != finished:
            finished, last = os.stat(result_path).st_mtime_ns, time.monotonic()
        if time.monotonic() - last > cell_timeout + 10:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return
        time.sleep(0.01)
