"""The grading side of the course: checks used by grade cells, editions, runner and nbgrader glue."""
