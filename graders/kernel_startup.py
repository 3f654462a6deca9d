"""What every grading and running kernel does before the first cell.

- nbgrader scores a grade cell with any stderr output as failed, so a harmless library warning
  would turn a correct answer into zero points: warnings are shown on stdout instead.
- Before every cell, the functions grade cells rely on are put back as they were at start-up:
  ``torch.testing.assert_close``, the checks in ``graders.checks``, the names ``checks`` and
  ``torch``, and IPython's traceback display. A student's code can still tamper with the kernel
  in deeper ways (it runs in the same process); this closes the one-line monkeypatches.
"""

import sys
import warnings

STARTUP = "import graders.kernel_startup; graders.kernel_startup.prepare()"
KERNEL_ARGUMENTS = [f"--IPKernelApp.exec_lines={STARTUP}"]
_TRACEBACK_METHODS = ("showtraceback", "_showtraceback", "showsyntaxerror", "showindentationerror")


def _show_on_stdout(message, category, filename, lineno, file=None, line=None):
    sys.stdout.write(warnings.formatwarning(message, category, filename, lineno, line))


def _snapshot():
    """(object, attribute, original value) for everything :func:`_restore` puts back."""
    import torch
    import torch.testing
    from IPython.core.interactiveshell import InteractiveShell

    from graders import checks

    saved = [(torch.testing, "assert_close", torch.testing.assert_close),
             (warnings, "showwarning", _show_on_stdout)]
    saved += [(checks, name, value) for name, value in vars(checks).items()
              if callable(value) and not name.startswith("__")]
    saved += [(InteractiveShell, name, getattr(InteractiveShell, name)) for name in _TRACEBACK_METHODS]
    return saved, {"checks": checks, "torch": torch}


def prepare() -> None:
    """Route warnings to stdout and restore the grading functions before every cell."""
    warnings.showwarning = _show_on_stdout
    try:
        from IPython import get_ipython

        shell = get_ipython()
        saved, names = _snapshot()
    except ImportError:  # outside IPython, or without torch: nothing to guard
        return
    if shell is None:
        return

    def restore(*_):
        for owner, name, value in saved:
            setattr(owner, name, value)
        for name in _TRACEBACK_METHODS:
            shell.__dict__.pop(name, None)
        for name, module in names.items():
            if name in shell.user_ns and shell.user_ns[name] is not module:
                shell.user_ns[name] = module

    shell.events.register("pre_run_cell", restore)
