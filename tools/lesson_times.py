"""Each lesson's estimated time, from its source, by the rule of docs/authors.md ("Stated time").

    minutes = round to 10 (prose words / WORDS_PER_MINUTE + exercises * MINUTES_PER_EXERCISE)

The words are the English edition's prose (its markdown cells; the Spanish runs a few per cent
longer, and both editions state one time); the exercises are its answer cells, the concept check
included. The time is stated in three places: the introduction of each edition ("**Estimated
time:** N minutes", "**Tiempo estimado:** N minutos") and the README's course map.

    python tools/lesson_times.py                       # the table; exit 1 when a stated time is off
    python tools/lesson_times.py --write               # write the computed times where they are stated
    python tools/lesson_times.py --write --lesson 05_debugging_lab

After ``--write``, regenerate the editions of the lessons it changed (``course release --lesson``).
Host side: it reads and writes the sources, never a kernel.
"""

import argparse
import re
import sys
from dataclasses import dataclass

import nbformat

from graders.lessons import ROOT, available_lessons, solution_path
from graders.nbgrader_adapter import is_solution_cell
from graders.release.editions import cell_language, filter_language

WORDS_PER_MINUTE = 80        # careful reading, with the example cells between run and looked at
MINUTES_PER_EXERCISE = 12    # writing, running the checks, one wrong try; the concept check is one
ROUND_TO = 10
README = ROOT / "README.md"

WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
STATED = {
    "en": re.compile(r"(\*\*Estimated time:\*\*\s+)(\d+)(\s+minutes)"),
    "es": re.compile(r"(\*\*Tiempo estimado:\*\*\s+)(\d+)(\s+minutos)"),
}
MAP_ROW = re.compile(r"^\| (\d\d) \|")
TIME_COLUMN = 3              # | # | lesson | what you learn | time | status |


@dataclass(frozen=True)
class LessonTime:
    lesson: str
    words: int
    exercises: int

    @property
    def minutes(self) -> int:
        return rounded(self.words / WORDS_PER_MINUTE + self.exercises * MINUTES_PER_EXERCISE)


def rounded(minutes: float) -> int:
    """To the nearest multiple of ``ROUND_TO`` (halves up), never below it."""
    return max(ROUND_TO, int(minutes / ROUND_TO + 0.5) * ROUND_TO)


def count_words(text: str) -> int:
    return len(WORD.findall(text))


def lesson_time(lesson: str, nb=None) -> LessonTime:
    """The rule's inputs for ``lesson`` (its source, or ``nb`` when given)."""
    nb = nbformat.read(solution_path(lesson), 4) if nb is None else nb
    english = filter_language(nb, "en")
    words = sum(count_words(cell.source) for cell in english.cells if cell.cell_type == "markdown")
    exercises = sum(1 for cell in english.cells if cell.cell_type == "code" and is_solution_cell(cell))
    return LessonTime(lesson, words, exercises)


def _introduction(nb, language: str):
    """The first markdown cell of ``language`` that states the time, or ``None``."""
    return next((cell for cell in nb.cells if cell.cell_type == "markdown"
                 and cell_language(cell) == language and STATED[language].search(cell.source)), None)


def stated_in_lesson(nb) -> dict:
    """``{language: minutes}`` as each edition's introduction states it (``None`` where it does not)."""
    found = {}
    for language, pattern in STATED.items():
        cell = _introduction(nb, language)
        found[language] = int(pattern.search(cell.source).group(2)) if cell else None
    return found


def _map_cells(line: str) -> list[str]:
    return line.split("|")[1:-1]


def stated_in_map(text: str) -> dict:
    """``{"NN": "time cell"}`` of the README's course map."""
    return {MAP_ROW.match(line).group(1): _map_cells(line)[TIME_COLUMN].strip()
            for line in text.splitlines() if MAP_ROW.match(line)}


def map_time(minutes: int) -> str:
    return f"{minutes} min"


def write_lesson(nb, minutes: int) -> bool:
    """Set the stated time of both introductions of ``nb`` to ``minutes``; whether anything changed."""
    changed = False
    for language, pattern in STATED.items():
        cell = _introduction(nb, language)
        if cell is None:
            raise SystemExit(f"no '{pattern.pattern}' in the {language} introduction")
        new = pattern.sub(lambda match: f"{match.group(1)}{minutes}{match.group(3)}", cell.source, count=1)
        changed |= new != cell.source
        cell.source = new
    return changed


def write_map(text: str, times: dict) -> str:
    """The README with the course map's time cell of each lesson in ``times`` (``{"NN": minutes}``)."""
    lines = []
    for line in text.splitlines(keepends=True):
        match = MAP_ROW.match(line)
        if match and match.group(1) in times:
            cells = _map_cells(line.rstrip("\n"))
            cells[TIME_COLUMN] = f" {map_time(times[match.group(1)])} "
            line = "|" + "|".join(cells) + "|" + ("\n" if line.endswith("\n") else "")
        lines.append(line)
    return "".join(lines)


def report(lessons) -> tuple[list[str], bool]:
    """The table's lines, and whether every stated time follows the rule."""
    course_map = stated_in_map(README.read_text(encoding="utf-8"))
    lines = [f"{'lesson':20} {'words':>6} {'exercises':>9} {'rule':>5} {'en':>5} {'es':>5} {'map':>8}"]
    right = True
    for lesson in lessons:
        nb = nbformat.read(solution_path(lesson), 4)
        time, stated = lesson_time(lesson, nb), stated_in_lesson(nb)
        in_map = course_map.get(lesson[:2], "-")
        ok = stated["en"] == stated["es"] == time.minutes and in_map == map_time(time.minutes)
        right &= ok
        lines.append(f"{lesson:20} {time.words:6} {time.exercises:9} {time.minutes:5} {stated['en']!s:>5} "
                     f"{stated['es']!s:>5} {in_map:>8}{'' if ok else '  ← differs'}")
    return lines, right


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the computed times where they are stated")
    parser.add_argument("--lesson", action="append", choices=available_lessons(),
                        help="only this lesson (repeatable); every lesson by default")
    args = parser.parse_args(argv)
    lessons = args.lesson or available_lessons()
    if args.write:
        times = {}
        for lesson in lessons:
            nb = nbformat.read(solution_path(lesson), 4)
            minutes = times[lesson[:2]] = lesson_time(lesson, nb).minutes
            if write_lesson(nb, minutes):
                nbformat.write(nb, solution_path(lesson))
                print(f"{lesson}: {minutes} minutes; regenerate it: course release --lesson {lesson}")
        README.write_text(write_map(README.read_text(encoding="utf-8"), times), encoding="utf-8")
    lines, right = report(lessons)
    print("\n".join(lines))
    return 0 if right else 1


if __name__ == "__main__":
    sys.exit(main())
