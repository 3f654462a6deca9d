"""The forked kernel proves what a fresh kernel per variant would: each copy starts from the kernel's
state, leaves it untouched, and its cells are scored as nbgrader scores them."""

import pytest
from forked_kernel import ForkedKernel, error_text, loses_points, printed, score
from nbformat.v4 import new_code_cell

pytestmark = pytest.mark.kernel


def test_a_copy_starts_from_the_kernel_and_leaves_it_as_it_was(tmp_path, make_notebook):
    nb = make_notebook("import random\nrandom.seed(3)\nx = [1]", "print(x, random.random())")
    with ForkedKernel(nb, tmp_path) as kernel:
        kernel.run(0)
        (forked,) = kernel.fork([new_code_cell("x.append(2)\nprint(x, random.random())")])
        own = kernel.run(1)
    assert printed(forked).split()[:2] == ["[1,", "2]"]
    assert printed(own).split()[:1] == ["[1]"], "the copy's change leaked into the kernel"
    assert printed(forked).split()[2] == printed(own).split()[1], "the copy's random state differs"


def test_a_copys_cells_are_scored_as_nbgrader_scores_them(tmp_path, make_notebook, grade_cell):
    cells = [grade_cell("assert 1 == 1", "passes", points=2), grade_cell("assert 1 == 2, 'no'", "fails"),
             grade_cell("0.5", "partial", points=2),
             grade_cell("import sys; print('!', file=sys.stderr)", "err")]
    with ForkedKernel(make_notebook("pass"), tmp_path) as kernel:
        passes, fails, partial, stderr = kernel.fork(cells)
    assert score(passes) == (2, 2) and not loses_points(passes)
    assert score(fails) == (0, 1) and error_text(fails) == "no"
    assert score(partial) == (0.5, 2) and loses_points(partial)
    assert score(stderr) == (0, 1)


def test_a_preloaded_check_module_is_imported_through_the_guard(tmp_path, make_notebook):
    check = "graders.lesson_checks.tensors"
    nb = make_notebook(f"import sys\nprint({check!r} in sys.modules)")
    with ForkedKernel(nb, tmp_path, preload=[check]) as kernel:
        (forked,) = kernel.fork([new_code_cell(f"import sys\nprint(sys.modules[{check!r}].__loader__)")])
        own = kernel.run(0)
    assert printed(own).strip() == "True"
    assert "_CheckModuleLoader" in printed(forked), printed(forked)


def test_the_guard_runs_before_every_cell_of_a_copy(tmp_path, make_notebook):
    """A copy's cell that patches a builtin does not change what the next cell sees."""
    with ForkedKernel(make_notebook("pass"), tmp_path) as kernel:
        _, seen = kernel.fork([new_code_cell("import builtins\nbuiltins.len = lambda x: 0"),
                               new_code_cell("print(len([1, 2]))")])
    assert printed(seen).strip() == "2"


def test_a_cell_past_its_time_limit_fails_and_a_dead_copy_loses_only_itself(tmp_path, make_notebook):
    nb = make_notebook("y = 1")
    with ForkedKernel(nb, tmp_path, cell_timeout=2) as kernel:
        kernel.run(0)
        finished = kernel.fork([new_code_cell("print(y)"), new_code_cell("import time\ntime.sleep(60)"),
                                new_code_cell("print('never')")])
        died = kernel.fork([new_code_cell("import os\nos._exit(3)")])
        deaf = kernel.fork([new_code_cell("import signal, time\n"  # stuck where no alarm reaches it
                                          "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
                                          "time.sleep(600)")])
        (after,) = kernel.fork([new_code_cell("print(y + 1)")])
    assert [printed(c).strip() for c in finished] == ["1", "", "never"]
    assert "time limit" in error_text(finished[1])
    assert died == [] and deaf == []
    assert printed(after).strip() == "2", "the kernel did not survive its copies"
