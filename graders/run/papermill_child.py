"""The child process of ``course run``: one notebook through papermill, naming the running cell.

It runs in its own process so that the runner can stop a whole lesson, kernel included,
when the lesson's time is up. Its kernel talks over unix sockets, as the class grader's do.
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import papermill
from jupyter_client import AsyncKernelManager
from papermill.engines import NotebookExecutionManager

from graders.grade.sandbox import use_unix_sockets
from graders.kernel_startup import KERNEL_ARGUMENTS
from graders.nbgrader_adapter import grade_id


class UnixSocketKernelManager(AsyncKernelManager):
    """A kernel on unix sockets in a folder of its own, removed with :meth:`cleanup_resources`."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.socket_folder = Path(tempfile.mkdtemp(prefix="course-run-"))
        use_unix_sockets(self, self.socket_folder)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            shutil.rmtree(self.socket_folder, ignore_errors=True)

    cleanup_resources = _async_cleanup_resources


def _describe_cell(self, cell, escape_str="papermill_description="):
    """The grade id, or the first line of code, so the progress bar names the running cell."""
    if cell is None or cell.get("cell_type") != "code":
        return None
    if grade_id(cell):
        return grade_id(cell)
    lines = [line.strip() for line in cell.get("source", "").splitlines() if line.strip()]
    return f"{lines[0][:40]:<40}" if lines else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--cell-timeout", type=int, default=300)
    parser.add_argument("--cwd", default=None)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    NotebookExecutionManager.get_cell_description = _describe_cell
    try:
        papermill.execute_notebook(
            args.input,
            args.output,
            kernel_name="python3",
            cwd=args.cwd,
            execution_timeout=args.cell_timeout,
            progress_bar=not args.no_progress,
            extra_arguments=list(KERNEL_ARGUMENTS),
            kernel_manager_class=UnixSocketKernelManager,
        )
    except papermill.PapermillExecutionError:
        return 1  # the output notebook records which cell failed and why
    return 0


if __name__ == "__main__":
    sys.exit(main())
