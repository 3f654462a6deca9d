"""``course grade``: a whole class graded in parallel, sandboxed, resumably (locally or on a Dask
cluster), then read back: item analysis, similarity, grades for the learning platform."""
