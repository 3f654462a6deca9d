"""``course grade``: a whole class graded in parallel, sandboxed, resumably; no grade is lost."""
