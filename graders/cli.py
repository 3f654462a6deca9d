"""The ``course`` command, which the Makefile wraps: ``course run | release | grade | check | data | hub``."""

import argparse
import os
import sys
import warnings
from pathlib import Path

from course.settings import DEVICE_CHOICES
from graders.hub.commands import add_hub_command
from graders.lessons import BUILD, LESSONS
from graders.nbgrader_settings import CELL_TIMEOUT_S, NOTEBOOK_TIMEOUT_S
from graders.run import CELL_TIMEOUT_S as RUN_CELL_TIMEOUT_S
from graders.run import LESSON_TIMEOUT_S


def _run(args) -> int:
    from graders.run.report import format_table
    from graders.run.runner import run_course

    report = run_course(args.lessons, fast=args.fast, device=args.device, out_dir=args.out,
                        cell_timeout=args.cell_timeout, lesson_timeout=args.lesson_timeout)
    print()
    print(format_table(report))
    print(f"\nReport: {args.out / 'report.json'} and {args.out / 'report.md'}")
    return 1 if any(lesson["error"] for lesson in report["lessons"]) else 0


def _release(args) -> int:
    from graders.release.editions import build_course, release

    for path in release(args.out / "editions", lessons=args.lesson):
        print(f"wrote {path}")
    course_dir = build_course(args.out / "nbgrader", "en", args.lesson)
    print(f"nbgrader course directory (source/, release/, gradebook.db): {course_dir}")
    return 0


def _grade(args) -> int:
    from graders.grade.classroom import Classroom, Options, default_out_dir, grade_class
    from graders.grade.results import summary
    from graders.grade.submissions import SubmissionsError
    from graders.nbgrader_adapter import grade_cells

    options = Options(args.lesson, Path(args.submissions), args.out_dir or default_out_dir(args.lesson),
                      workers=args.workers, sandbox=args.sandbox, cell_timeout=args.cell_timeout,
                      notebook_timeout=args.notebook_timeout, scheduler=args.scheduler)
    try:
        if args.scheduler:
            from graders.grade.dask_pool import DaskUnavailable, describe_cluster

            print(f"Grading {args.lesson} from {options.submissions} on the Dask cluster at "
                  f"{args.scheduler}; its workers:")
            try:
                print("\n".join(f"  {line}" for line in describe_cluster(args.scheduler, args.sandbox)))
            except DaskUnavailable as error:
                print(f"error: {error}", file=sys.stderr)
                return 2
        else:
            print(f"Grading {args.lesson} from {options.submissions} with {options.workers} workers.")
            print("Protections: " + "; ".join(Classroom(options).policy.protections()))
        rows, csv_path = grade_class(options)
    except SubmissionsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = Path(options.out_dir)
    cells = grade_cells(out / "nbgrader", options.lesson)
    reports, flagged = _after_grading(args, out, rows, cells)
    table, picture = summary(rows, cells, out, flagged=flagged)
    print()
    print(table)
    print(f"\nResults in {options.out_dir}")
    print(f"Grades CSV: {csv_path}")
    print(f"Feedback:   {out / 'feedback'}/<student_id>.html")
    print(f"Gradebook:  {out / 'nbgrader' / 'gradebook.db'} (nbgrader formgrader/export)")
    print(f"Scores:     {picture}")
    print("\n".join(reports))
    return 0


def _after_grading(args, out: Path, rows, cells) -> tuple[list[str], list]:
    """Item analysis, similarity and the platform exports; returns their lines and the flagged items."""
    import shutil

    from graders.grade import item_analysis, lms_export, similarity
    from graders.grade.submissions import SubmissionsError, find_submissions

    analysis = item_analysis.analyse(out / "nbgrader", args.lesson, rows, cells)
    paths = item_analysis.write_report(analysis, out)
    lines = [f"Items:      {paths['html']} (what the class got wrong; also .csv and .png)"]
    if analysis.tampering:
        lines.append(f"Tampering:  {len(analysis.tampering)} submission(s) whose code reaches for the "
                     "grader's machinery: " + ", ".join(sorted(analysis.tampering))
                     + " (graded like any other; grades.csv's tampering column says what)")
    earlier = None
    if args.earlier_submissions:
        scratch = out / "scratch" / "earlier"
        shutil.rmtree(scratch, ignore_errors=True)  # a zip unpacked by a previous run is not this one
        try:
            earlier = find_submissions(args.earlier_submissions, args.lesson, scratch)
        except SubmissionsError as error:  # the grades are written: report it, compare the rest
            lines.append(f"Earlier:    not compared: {error}")
    threshold = args.similarity_threshold
    similar = similarity.analyse(out / "nbgrader", args.lesson, rows,
                                 similarity.DEFAULT_THRESHOLD if threshold is None else threshold, earlier)
    lines.append(f"Similarity: {similarity.write_html(similar, out / 'similarity.html')} "
                 f"({similarity.verdict(similar)}: leads for a human, not verdicts)")
    for title, pairs in (("like the reference", similar.reference), ("like earlier terms", similar.earlier)):
        if pairs:
            lines.append(f"            {title}, {len(pairs)}: "
                         + ", ".join(f"{p.a} ({p.b}, {p.similarity:.0%})" for p in pairs))
    for platform in args.export or ():
        export = lms_export.export(rows, cells, args.lesson, platform, out, language=args.lms_language,
                                   assignment=args.lms_assignment)
        lines.append(f"Export:     {export.path} ({export.exported} students for {platform})")
        if export.unmatched:
            lines.append(f"            NOT in it, {len(export.unmatched)}: "
                         + ", ".join(row.student for row in export.unmatched)
                         + f" (see {export.unmatched_path})")
    return lines, analysis.flagged


def _check(args) -> int:
    from graders.selfcheck import run_visible_checks

    report, all_passed = run_visible_checks(Path(args.notebook))
    print(report)
    return 0 if all_passed else 1


def _data(args) -> int:
    from course.data import DataNotFoundError, ensure_fashion_mnist

    try:
        root = ensure_fashion_mnist()
    except DataNotFoundError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"FashionMNIST ready in {root / 'FashionMNIST' / 'raw'}")
    return 0


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share between 0 and 1")
    return value


def _earlier_submissions(text: str) -> Path:
    # checked before grading, which takes minutes; the layout is read after it
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist: give earlier terms' submissions of the "
                                         "lesson as nbgrader's submitted/ folder, a folder of notebooks "
                                         "or a .zip")
    return path


def main(argv=None) -> int:
    # nbgrader's SQLAlchemy session warnings say nothing an instructor can act on
    warnings.filterwarnings("ignore", module="nbgrader")
    parser = argparse.ArgumentParser(prog="course", description=__doc__)
    parser.add_argument("--out", type=Path, default=BUILD,
                        help="where executed notebooks, reports and course directories go")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="execute and grade every lesson, write build/report.*")
    run.add_argument("--fast", action="store_true", help="quick mode (COURSE_FAST=1)")
    run.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    run.add_argument("--lessons", nargs="*", choices=LESSONS, default=None)
    run.add_argument("--cell-timeout", type=int, default=RUN_CELL_TIMEOUT_S,
                     help="seconds per cell (default %(default)s)")
    run.add_argument("--lesson-timeout", type=int, default=LESSON_TIMEOUT_S,
                     help="seconds per lesson (default %(default)s)")
    run.set_defaults(handler=_run)

    grade = commands.add_parser("grade", help="grade a whole class's submissions of one lesson")
    grade.add_argument("submissions", help="nbgrader submitted/ folder, folder of notebooks, or .zip")
    grade.add_argument("--lesson", required=True, choices=LESSONS)
    grade.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    grade.add_argument("--out-dir", type=Path, default=None, help="default: build/grading/<lesson>")
    grade.add_argument("--sandbox", choices=["auto", "off"], default="auto")
    grade.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT_S,
                       help="seconds per cell (default %(default)s)")
    grade.add_argument("--notebook-timeout", type=int, default=NOTEBOOK_TIMEOUT_S,
                       help="seconds per notebook (default %(default)s)")
    grade.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="grade on the workers of this Dask scheduler (tcp://HOST:8786)")
    grade.add_argument("--export", action="append", choices=["moodle", "canvas", "csv"],
                       help="also write the grades as this platform imports them (repeatable)")
    grade.add_argument("--lms-language", choices=["en", "es"], default="en",
                       help="the language of your Moodle interface (its import reads column names)")
    grade.add_argument("--lms-assignment", default=None,
                       help="the Canvas assignment's column name (default: the lesson)")
    grade.add_argument("--similarity-threshold", type=_share, default=None,
                       help="list pairs sharing more than this share of their code (default: "
                       "DEFAULT_THRESHOLD in graders/grade/similarity.py)")
    grade.add_argument("--earlier-submissions", type=_earlier_submissions, default=None, metavar="DIR",
                       help="also compare each submission with these earlier terms' submissions of the "
                       "lesson (a folder or .zip in any layout the submissions argument accepts)")
    grade.set_defaults(handler=_grade)

    check = commands.add_parser("check", help="run a notebook's visible checks and report them, under "
                                "grading's conditions (quick version, CPU, the cell time limit)")
    check.add_argument("notebook")
    check.set_defaults(handler=_check)

    release = commands.add_parser("release", help="regenerate notebooks/<lang>/ and the nbgrader "
                                  "course directory")
    release.add_argument("--lesson", action="append", choices=LESSONS,
                         help="only this lesson (repeatable; default: every lesson)")
    release.set_defaults(handler=_release)
    commands.add_parser("data", help="make FashionMNIST available in data/").set_defaults(
        handler=_data)
    add_hub_command(commands)

    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
