"""The grading side of the course: what runs in a student's kernel, what judges, what runs on the host.

Inside a student's kernel (imports only ``course`` and libraries):
    checks.py            the checks grade cells call (expected / got / hint), and their harness
    lesson_checks/       one check module per lesson (``lessons.lesson_names`` maps a lesson to it);
                         its hints in hints/*.toml, its concept questions in questions/*.toml
    kernel_startup.py    what every kernel runs before the first cell

The judge, in the grading worker's process, out of the student's code's reach:
    judge/               points decided from plain data the kernel sends (wire.py) and what only the
                         grader knows: the concept questions today (concepts.py)

On the host, in pipeline order (may import the kernel side, never the reverse):
    lessons.py           where the lessons, editions and build output live; the names of a lesson
    nbgrader_settings.py the course's nbgrader configuration
    nbgrader_adapter.py  where the course drives nbgrader (its API, pipelines, gradebook)
    release/             student editions and nbgrader course directories (``course release``)
    run/                 ``course run``: every lesson through papermill, then nbgrader
    grade/               ``course grade``: a whole class (pool, worker, sandbox and its cgroups,
                         resilient execution); then item analysis, similarity, tampering leads, grades
                         for Moodle/Canvas; or on Dask
    selfcheck.py         ``course check``: a student's notebook, its visible checks only
    notebook_grading/    one notebook through nbgrader: autograde, repairs, feedback without hidden tests
    hub/                 ``course hub``: the course on a JupyterHub of its own (accounts, exchange,
                         each role's configuration, feedback through the exchange)
    cli.py               the ``course`` command: run, release, grade, check, data, hub
"""
