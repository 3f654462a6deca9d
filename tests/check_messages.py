"""What the tests of the per-lesson checks share: a check that must fail, and how it must say so."""

import pytest

import course
from graders import checks
from graders.checks import CheckFailed


def failure(check, *args, says, **kwargs) -> str:
    """``check(*args, **kwargs)`` fails with the course's layout (expected, got and hint, in the
    edition's language) and a message holding each of ``says``; returns that message.

    ``says`` (a string, or several) is required and may not be empty: a test names the message it
    expects, since any failure at all, for any reason, would satisfy the layout alone."""
    says = (says,) if isinstance(says, str) else tuple(says)
    if not says or not all(isinstance(part, str) and part.strip() for part in says):
        raise TypeError(f"failure() needs says=: the words the message must hold, not {says!r}")
    with pytest.raises(CheckFailed) as caught:
        check(*args, **kwargs)
    message = str(caught.value)
    words = checks.WORDS[course.get_language()]
    assert all(f"\n  {words[part]}: " in message for part in ("expected", "got", "hint")), message
    assert all(part in message for part in says), message
    return message
