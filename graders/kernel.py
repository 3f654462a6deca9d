"""What every grading and running kernel does before the first cell.

nbgrader scores a grade cell with any stderr output as failed, so a harmless library warning
would turn a correct answer into zero points. Warnings are still shown, on stdout.
"""

import sys
import warnings

STARTUP = "import graders.kernel; graders.kernel.prepare()"
KERNEL_ARGUMENTS = [f"--IPKernelApp.exec_lines={STARTUP}"]


def _show_on_stdout(message, category, filename, lineno, file=None, line=None):
    sys.stdout.write(warnings.formatwarning(message, category, filename, lineno, line))


def prepare() -> None:
    """Send warnings to stdout instead of stderr."""
    warnings.showwarning = _show_on_stdout
