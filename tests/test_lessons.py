"""graders/lessons.py: the names one lesson goes by, and the editions' languages."""

import pytest

from course import settings
from graders import lesson_checks
from graders.lessons import LANGUAGES, LESSONS, edition_of_assignment, lesson_names


def test_the_host_side_names_the_languages_the_kernel_side_speaks():
    """Written twice because the hub's nbgrader plugins must not import torch (course does): held equal."""
    assert LANGUAGES == settings.LANGUAGES


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_name_of_a_lesson_leads_back_to_it(lesson):
    names = lesson_names(lesson)
    modules = {module.__name__.rpartition(".")[2] for module in lesson_checks.lesson_modules()}
    assert names.check_module in modules
    assert {edition_of_assignment(assignment) for assignment in names.assignments.values()} == {
        (lesson, language) for language in LANGUAGES}


def test_an_unknown_lesson_is_refused_with_the_list_of_lessons():
    with pytest.raises(ValueError, match="01_tensors, 02_autograd"):
        lesson_names("01_tensor")
    assert edition_of_assignment("01_tensors") is None
    assert edition_of_assignment("99_nothing_es") is None
