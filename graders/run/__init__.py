"""``course run``: every lesson executed by papermill, graded by nbgrader, summed up in a report."""
