"""The class grader's executor: kernels that fail to start, and the one zmq context they share."""

import gc
import json
import sys

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from graders.grade import resilient_execute
from graders.grade.resilient_execute import ResilientExecute, SharedContextKernelManager

pytestmark = pytest.mark.kernel

# Dies at its first `failures` launches (as a kernel that cannot start would), then starts for real.
LAUNCHER = """
import os, sys
count_file, failures, connection_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
launches = int(open(count_file).read()) + 1 if os.path.exists(count_file) else 1
open(count_file, "w").write(str(launches))
if launches <= failures:
    sys.exit(1)
os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file])
"""


@pytest.fixture
def flaky_kernel(tmp_path, monkeypatch):
    """A kernelspec that fails ``failures`` times before it starts; returns a launch counter."""
    def install(failures: int):
        folder = tmp_path / "jupyter" / "kernels" / "flaky"
        folder.mkdir(parents=True)
        count = tmp_path / "launches"
        argv = [sys.executable, "-c", LAUNCHER, str(count), str(failures), "{connection_file}"]
        (folder / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "flaky",
                                                        "language": "python"}))
        monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
        return lambda: int(count.read_text())
    return install


def _run(**options):
    nb = new_notebook(cells=[new_code_cell("print(6 * 7)")])
    nb, _ = ResilientExecute(kernel_name="flaky", timeout=60, startup_timeout=60, **options).preprocess(
        nb, {"metadata": {"path": "."}})
    return nb.cells[0].outputs[0]["text"]


def test_a_kernel_that_dies_while_starting_is_replaced(flaky_kernel):
    launches = flaky_kernel(failures=2)
    assert _run(start_attempts=3) == "42\n"
    assert launches() == 3


def test_a_kernel_that_never_starts_fails_after_the_attempts(flaky_kernel):
    launches = flaky_kernel(failures=10)
    with pytest.raises(RuntimeError, match="died"):
        _run(start_attempts=2)
    assert launches() == 2


def test_every_kernel_and_client_uses_the_one_process_wide_context(flaky_kernel):
    flaky_kernel(failures=0)
    km = SharedContextKernelManager()
    assert km.context is resilient_execute._CONTEXT and km.client().context is resilient_execute._CONTEXT
    for _ in range(2):  # managers and clients come and go; the context stays open
        assert _run() == "42\n"
        gc.collect()
    assert not resilient_execute._CONTEXT.closed


def test_a_socket_folder_too_deep_for_unix_sockets_is_refused_with_the_fix(tmp_path):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    with pytest.raises(ValueError, match="TMPDIR"):
        ResilientExecute(kernel_name="python3", socket_root=str(deep)).create_kernel_manager()


def test_a_kernel_that_breaks_the_message_protocol_is_an_incident_of_its_cell():
    """A cell that changes the key the kernel signs its messages with: every later message fails
    the grader's signature check. That cell becomes an incident and the rest still runs."""
    nb = new_notebook(cells=[new_code_cell("print('before')"),
                             new_code_cell("get_ipython().kernel.session.key = b'forged'"),
                             new_code_cell("print('after')")])
    nb, _ = ResilientExecute(timeout=20, interrupt_grace=5).preprocess(nb, {"metadata": {"path": "."}})
    before, forged, after = (cell.outputs for cell in nb.cells)
    assert before[0]["text"] == "before\n" and after[0]["text"] == "after\n"
    assert forged[0]["ename"] == resilient_execute.INCIDENT
    assert "cell 2 broke the kernel" in forged[0]["evalue"] and "Invalid Signature" in forged[0]["evalue"]


def test_the_cells_after_an_oversized_message_keep_their_outputs_and_errors():
    """One line past the largest message the grader accepts costs zmq's connection for good; the
    cells after it still show what they print and raise (a failed check stays failed)."""
    too_big = 8 * ResilientExecute().max_output_bytes + 1
    nb = new_notebook(cells=[new_code_cell(f"print('y' * {too_big})"), new_code_cell("print('after')"),
                             new_code_cell("assert 1 == 2, 'a failed check'")])
    nb, _ = ResilientExecute(timeout=20).preprocess(nb, {"metadata": {"path": "."}})
    flood, after, check = (cell.outputs for cell in nb.cells)
    assert [o["text"] for o in flood] == [resilient_execute.CUT_SHORT]
    assert [o["text"] for o in after] == ["after\n"]
    assert [(o["ename"], o["evalue"]) for o in check] == [("AssertionError", "a failed check")]
