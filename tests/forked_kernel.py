"""A grading kernel that walks a notebook cell by cell and, at any cell, tries other answers in forked
copies of itself: each copy starts from exactly the state the notebook had reached (its variables,
its random state, its imports), runs the cells it is given, and goes away, leaving the kernel as it
was. One kernel then proves what a fresh kernel per variant would, at the cost of one execution.

What a copy's cells output is scored with nbgrader's own rule (``nbgrader.utils.determine_grade``).
Files a copy writes stay written: the walk runs the notebook's own cells after the copies, so a
file a later cell writes is written again by the kernel.
"""

import copy
import json
import os
import tempfile
from pathlib import Path

from nbclient import NotebookClient
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, output_from_msg
from nbgrader.utils import determine_grade

from graders.grade.sandbox import use_unix_sockets
from graders.kernel_startup import KERNEL_ARGUMENTS
from graders.nbgrader_adapter import is_grade_cell, is_solution_cell
from graders.nbgrader_settings import CELL_TIMEOUT_S

_HERE = str(Path(__file__).parent)
# Imports the kernel side and leaves no name behind in the notebook's namespace.
_LOAD = (f"(lambda s: (s.path.insert(0, {_HERE!r}), __import__('fork_in_kernel'), "
         f"s.path.remove({_HERE!r})))(__import__('sys'))")
# A forked copy of a process keeps one thread: OpenMP's pool would hang it. The kernel computes with
# one thread from its start, so that a copy computes as the kernel itself does.
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class CommandFailed(RuntimeError):
    """A command the walk itself sent to the kernel raised."""


class ForkedKernel:
    """``with ForkedKernel(nb, cwd) as kernel``: ``kernel.run(i)`` executes the notebook's cell ``i``;
    ``kernel.fork(cells)`` runs other cells in a copy of the kernel and returns them executed.
    The modules named in ``preload`` are imported before the notebook's first cell."""

    def __init__(self, nb: NotebookNode, cwd, cell_timeout: int = CELL_TIMEOUT_S, preload=()):
        self.nb = copy.deepcopy(nb)
        self.preload = list(preload)
        self.cell_timeout = cell_timeout
        self.client = NotebookClient(self.nb, timeout=cell_timeout, allow_errors=True,
                                     kernel_name="python3", extra_arguments=list(KERNEL_ARGUMENTS),
                                     resources={"metadata": {"path": str(cwd)}})
        self._scratch = tempfile.TemporaryDirectory(prefix="forks-")
        self.client.km = self.client.create_kernel_manager()
        use_unix_sockets(self.client.km, Path(self._scratch.name))

    def __enter__(self):
        self._kernel = self.client.setup_kernel(env={**os.environ, **_ONE_THREAD})
        self._kernel.__enter__()
        self._command(_LOAD)
        for module in self.preload:  # imported once here, not again in each copy that first needs it
            self._command(f"__import__({module!r})")
        return self

    def __exit__(self, *exc):
        self._scratch.cleanup()
        return self._kernel.__exit__(*exc)

    def run(self, index: int) -> NotebookNode:
        """Execute the notebook's cell ``index`` in the kernel; the cell, with its outputs."""
        cell = self.nb.cells[index]
        if cell.cell_type == "code":
            self.client.execute_cell(cell, index)
        return cell

    def fork(self, cells: list[NotebookNode]) -> list[NotebookNode]:
        """Run ``cells`` in a copy of the kernel; copies of them with their outputs, one per cell
        that finished (fewer when a cell ran past the time limit or the copy died)."""
        results = Path(self._scratch.name) / "results.json"
        results.unlink(missing_ok=True)
        sources = [cell.source for cell in cells]
        self._command(f"__import__('fork_in_kernel').run_in_fork({sources!r}, {str(results)!r}, "
                      f"{self.cell_timeout})", timeout=(self.cell_timeout + 15) * len(cells))
        messages = json.loads(results.read_text()) if results.exists() else []
        executed = []
        for cell, outputs in zip(cells, messages, strict=False):  # a copy that died finished fewer
            done = copy.deepcopy(cell)
            done.outputs = [output_from_msg({"header": {"msg_type": m["msg_type"]}, "content": m["content"]})
                            for m in outputs]
            executed.append(done)
        return executed

    def _command(self, code: str, timeout: int | None = None) -> None:
        index = len(self.nb.cells)
        self.nb.cells.append(new_code_cell(code))
        self.client.timeout = timeout or self.cell_timeout
        try:
            cell = self.client.execute_cell(self.nb.cells[index], index, store_history=False)
        finally:
            self.nb.cells.pop()
            self.client.timeout = self.cell_timeout
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors:
            raise CommandFailed(f"{errors[0].ename}: {errors[0].evalue}")


def score(cell: NotebookNode) -> tuple[float, float]:
    """``(score, points)`` of an executed grade cell, by nbgrader's rule."""
    assert is_grade_cell(cell), "only a grade cell has a score"
    got, points = determine_grade(cell)
    return float(got or 0), points


def loses_points(cell: NotebookNode) -> bool:
    """Whether ``cell`` is a test cell (a grade cell that is not an answer) scored below its points."""
    if not is_grade_cell(cell) or is_solution_cell(cell) or cell.cell_type != "code":
        return False
    got, points = score(cell)
    return got < points


def error_text(cell: NotebookNode) -> str:
    """What an executed cell raised (the exception's message), or ''."""
    return "\n".join(o.evalue for o in cell.outputs if o.output_type == "error")


def printed(cell: NotebookNode) -> str:
    """What an executed cell printed on stdout."""
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
