"""Every lesson states the time the rule of docs/authors.md ("Stated time") gives it, in both
introductions and in the README's course map (``tools/lesson_times.py --write`` puts it there)."""

import importlib.util

import nbformat
import pytest
from lesson_files import LESSONS

from graders.lessons import ROOT, solution_path

spec = importlib.util.spec_from_file_location("lesson_times", ROOT / "tools" / "lesson_times.py")
lesson_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lesson_times)


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_stated_time_follows_the_rule(lesson):
    nb = nbformat.read(solution_path(lesson), 4)
    time = lesson_times.lesson_time(lesson, nb)
    stated = lesson_times.stated_in_lesson(nb)
    in_map = lesson_times.stated_in_map(lesson_times.README.read_text(encoding="utf-8")).get(lesson[:2])
    expected = {"en": time.minutes, "es": time.minutes, "map": lesson_times.map_time(time.minutes)}
    assert {**stated, "map": in_map} == expected, (
        f"{lesson}: {time.words} words and {time.exercises} exercises give {time.minutes} minutes; "
        f"run: python tools/lesson_times.py --write --lesson {lesson}")


def test_the_rule():
    assert lesson_times.rounded(114.9) == 110 and lesson_times.rounded(115) == 120
    assert lesson_times.rounded(3) == 10
    time = lesson_times.LessonTime("xx", words=4000, exercises=10)
    assert time.minutes == 170                       # 4000 / 80 + 10 * 12 = 170
    assert lesson_times.count_words("Un tensor es un array; `view(2, 6)` — don't") == 9


def test_writing_puts_the_time_in_both_introductions_and_the_map():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("**Tiempo estimado:**\n75 minutos.", metadata={"tags": ["lang:es"]}),
        nbformat.v4.new_markdown_cell("**Estimated time:** 75 minutes (more on a CPU).",
                                      metadata={"tags": ["lang:en"]}),
    ])
    assert lesson_times.write_lesson(nb, 130)
    assert lesson_times.stated_in_lesson(nb) == {"es": 130, "en": 130}
    assert nb.cells[1].source == "**Estimated time:** 130 minutes (more on a CPU)."
    assert not lesson_times.write_lesson(nb, 130)
    course_map = ("| # | lesson | what you learn | time | status |\n|---|---|---|---|---|\n"
                  "| 01 | [a](b) | x, `y` | 45 min | ready |\n| 02 | [c](d) | z | 70 min | ready |\n")
    written = lesson_times.write_map(course_map, {"02": 150})
    assert lesson_times.stated_in_map(written) == {"01": "45 min", "02": "150 min"}
    assert written.splitlines()[3] == "| 02 | [c](d) | z | 150 min | ready |"
