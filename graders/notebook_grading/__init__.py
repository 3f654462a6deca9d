"""Grading one notebook with stock nbgrader: autograde (``autograde.py``), the gradebook's repairs
before it (``sanitize.py``), feedback without hidden tests (``redacted_feedback.py``). A student's
own check of a notebook is ``graders/selfcheck.py``."""
