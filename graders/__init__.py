"""The grading side of the course, in two halves that never mix.

Inside a student's kernel (imports only ``course`` and libraries):
    checks.py            the checks grade cells call (expected / got / hint)
    kernel_startup.py    what every kernel runs before the first cell

On the host, in pipeline order (may import the kernel side, never the reverse):
    lessons.py           where the lessons, editions and build output live
    nbgrader_settings.py the course's nbgrader configuration
    nbgrader_adapter.py  the one place that calls nbgrader
    release/             student editions and nbgrader course directories (``course release``)
    course_run/          every lesson through papermill, then nbgrader (``course run``)
    notebook_grading/    one notebook graded: autograde, feedback, repairs, ``course check``
    class_grading/       a whole class (``course grade``): pool, worker, sandbox, resilient execution;
                         then item analysis, similarity, grades for Moodle/Canvas; or on Dask
    cli.py               the ``course`` command
"""
