"""The course on a JupyterHub of its own (``course hub``, ``make hub``), host side.

One machine, one course, real local users: an instructor and students, each with a home, a
JupyterLab with nbgrader's extensions (the assignment list for everyone, the formgrader for the
instructor) and one exchange folder through which lessons go out and submissions and feedback
come back.

    roster.py         who is in the course (user, role, edition's language) and their local accounts
    environment.py    the Python every user runs (this environment, on an interpreter they can reach)
    exchange.py       the exchange folder: created with nbgrader's modes, checked, the fix said
    nbgrader_roles.py what nbgrader runs with, per role: course id, exchange, enrolment, editions
    feedback.py       ``course grade``'s feedback put where ``nbgrader release_feedback`` reads it
    hub_config.py     JupyterHub's configuration, built from :class:`HubSettings`
    commands.py       ``course hub serve | check | feedback``

A lesson is released as two nbgrader assignments, ``NN_slug_es`` and ``NN_slug_en`` (one notebook
each, ``NN_slug.ipynb``, with the same grade cells); a student's assignment list shows the edition
of the student's language (the roster's), and ``course grade`` grades both editions together.
"""
