"""The course on a JupyterHub of its own (``course hub``, ``make hub``), host side.

One machine, one course, real local users: an instructor and students, each with a home, a
JupyterLab with nbgrader's extensions (the assignment list for everyone, the formgrader for the
instructor) and one exchange folder through which lessons go out and submissions and feedback
come back.

    roster.py         who is in the course (user, role, edition's language) and their local accounts
    environment.py    the Python every user runs (the course from its wheel, on an interpreter they
                      can reach, outside the repository)
    exchange.py       the exchange folder: created with nbgrader's modes, checked, the fix said; what
                      collect may take (a student's own folder, no link)
    nbgrader_roles.py what nbgrader runs with, per role: course id, exchange, enrolment, editions,
                      the collect that takes only what each student submitted
    feedback.py       ``course grade``'s feedback put where ``nbgrader release_feedback`` reads it
    lockdown.py       what no student may reach (homes, the repository, the grader's slots): closed,
                      checked
    limits.py         memory, CPU and idle time per user's server; spawner.py enforces them in cgroups
    hub_config.py     JupyterHub's configuration, built from :class:`HubSettings`
    commands.py       ``course hub serve | check | feedback``

A lesson is released as two nbgrader assignments, ``NN_slug_es`` and ``NN_slug_en`` (one notebook
each, ``NN_slug.ipynb``, with the same grade cells); a student's assignment list shows the edition
of the student's language (the roster's), and ``course grade`` grades both editions together.
"""
