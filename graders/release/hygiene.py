"""Notebooks are stored without outputs or execution counts (``python -m graders.release.hygiene``).

The pre-commit hook and the test suite both call :func:`dirty_notebooks`, so CI catches what a
contributor's hook missed. ``--fix`` strips them in place.
"""

import argparse
import sys
from pathlib import Path

import nbformat

from graders.lessons import EDITIONS, SOLUTIONS
from graders.release.editions import strip_outputs


def committed_notebooks() -> list[Path]:
    return sorted(SOLUTIONS.glob("*.ipynb")) + sorted(EDITIONS.glob("*/*.ipynb"))


def is_dirty(nb) -> bool:
    return any(
        cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
        for cell in nb.cells
    )


def dirty_notebooks(paths) -> list[Path]:
    """The notebooks among ``paths`` that carry outputs or execution counts."""
    return [Path(p) for p in paths if is_dirty(nbformat.read(p, 4))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="*", help="notebooks (default: every committed one)")
    parser.add_argument("--fix", action="store_true", help="strip outputs in place")
    args = parser.parse_args(argv)
    dirty = dirty_notebooks(args.paths or committed_notebooks())
    for path in dirty:
        if args.fix:
            nbformat.write(strip_outputs(nbformat.read(path, 4)), path)
            print(f"stripped outputs: {path}")
        else:
            print(f"{path}: has outputs or execution counts; run "
                  f"`python -m graders.release.hygiene --fix {path}`", file=sys.stderr)
    return 1 if dirty and not args.fix else 0


if __name__ == "__main__":
    sys.exit(main())
