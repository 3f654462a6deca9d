"""``course run``: every lesson executed by papermill, graded by nbgrader, summed up in a report."""

# A student's machine runs the full lessons: a cell may train for minutes, far past grading's limits
# (graders/nbgrader_settings.py), which run the quick version.
CELL_TIMEOUT_S = 600
LESSON_TIMEOUT_S = 3600
