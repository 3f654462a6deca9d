"""Shared fixtures: a built nbgrader course per test worker."""

import pytest
from lesson_files import LESSONS

from graders.release.editions import build_course


@pytest.fixture(scope="session")
def course_dir(tmp_path_factory):
    """An nbgrader course directory built from ``solutions/`` (English source, all lessons)."""
    return build_course(tmp_path_factory.mktemp("course"), "en", LESSONS)


@pytest.fixture
def english():
    """Checks speak English for the length of a test, whatever the test switches to."""
    import course

    course.set_language("en")
    yield
    course.set_language("en")
