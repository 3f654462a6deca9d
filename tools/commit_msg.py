"""The commit-message hook (CONTRIBUTING.md, "Commits"): a subject of at most 72 characters, then a
blank line before the body.

    pre-commit install --hook-type commit-msg      # once; git then runs it on every commit
    python tools/commit_msg.py .git/COMMIT_EDITMSG  # by hand
"""

import sys
from pathlib import Path

SUBJECT_MAX = 72


def problems(message: str) -> list[str]:
    """What is wrong with a commit message, each with what to do; git's comment lines ignored."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    if not lines or not lines[0].strip():
        return ["the first line is the subject, and it is empty: say what the commit changes"]
    found = []
    if len(lines[0]) > SUBJECT_MAX:
        found.append(f"the subject has {len(lines[0])} characters, more than {SUBJECT_MAX}: keep what "
                     "changed in it and move the why, the figures and the lists to the body")
    if len(lines) > 1 and lines[1].strip():
        found.append("the second line is not blank: leave one blank line between subject and body")
    return found


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python tools/commit_msg.py <commit message file>", file=sys.stderr)
        return 2
    found = problems(Path(argv[0]).read_text(encoding="utf-8"))
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
