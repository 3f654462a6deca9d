"""The judge: where a class's points are decided, in the grading worker's own process, which the
student's code cannot reach (the kernel runs sandboxed, as another user, in another process).

The kernel is asked for plain data (``wire.py``: numbers, strings, dtypes, tensors and containers
of them, decoded without pickle; any other object is refused and said so), and the verdict is
computed here, from that data and from what the grader alone knows: who submitted the notebook, who
is in the class, the reference's answers. What the kernel prints or reports about its own grade
decides nothing.

    wire.py      the plain-data codec: the encoder the kernel runs, the strict decoder here
    concepts.py  the concept questions' verdict: whose draw, which answers right, the points
"""
