"""The ``course`` command, which the Makefile wraps: ``course run | release | data``."""

import argparse
import sys
from pathlib import Path

from graders.lessons import BUILD, LESSONS


def _run(args) -> int:
    from graders.run import format_table, run_course

    report = run_course(args.lessons, fast=args.fast, device=args.device, out_dir=args.out,
                        cell_timeout=args.cell_timeout, lesson_timeout=args.lesson_timeout)
    print()
    print(format_table(report))
    print(f"\nReport: {args.out / 'report.json'} and {args.out / 'report.md'}")
    return 1 if any(lesson["error"] for lesson in report["lessons"]) else 0


def _release(args) -> int:
    from graders.editions import build_course, release

    for path in release(args.out / "editions"):
        print(f"wrote {path}")
    course_dir = build_course(args.out / "course", "en")
    print(f"nbgrader course directory (source/, release/, gradebook.db): {course_dir}")
    return 0


def _data(args) -> int:
    from course.data import DataNotFoundError, ensure_fashion_mnist

    try:
        root = ensure_fashion_mnist()
    except DataNotFoundError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"FashionMNIST ready in {root / 'FashionMNIST' / 'raw'}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="course", description=__doc__)
    parser.add_argument("--out", type=Path, default=BUILD,
                        help="where executed notebooks, reports and course directories go")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="execute and grade every lesson, write build/report.*")
    run.add_argument("--fast", action="store_true", help="quick mode (COURSE_FAST=1)")
    run.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    run.add_argument("--lessons", nargs="*", choices=LESSONS, default=None)
    run.add_argument("--cell-timeout", type=int, default=600, help="seconds per cell")
    run.add_argument("--lesson-timeout", type=int, default=3600, help="seconds per lesson")
    run.set_defaults(handler=_run)

    commands.add_parser("release", help="regenerate notebooks/<lang>/ and the nbgrader course "
                        "directory").set_defaults(handler=_release)
    commands.add_parser("data", help="make FashionMNIST available in data/").set_defaults(
        handler=_data)

    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
