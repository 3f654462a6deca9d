"""Grading one notebook with stock nbgrader: autograde, feedback without hidden tests, repairs, self-check."""
