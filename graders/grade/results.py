"""A class's results: one row per student, the grades CSV, the summary table and the score picture."""

import csv
from dataclasses import dataclass, field
from pathlib import Path

# A "failed" submission (the grader itself broke) is tried again on the next run.
DONE = ("graded", "partial", "invalid", "wrong_lesson", "timeout")
STATUSES = (*DONE, "failed")

CSV_FIXED = ("student", "student_id")
CSV_TAIL = ("total", "max", "status", "reason")
# Whose concept questions were graded (graders/lesson_checks/identity.py): for whom they were drawn,
# why (own, submitter, another_student, unknown), the name the notebook gave, and which questions.
CSV_DRAW = ("questions_for", "questions_status", "questions_named", "questions")
# What the submission's code reaches for of the grader's machinery (graders/grade/tampering.py).
CSV_LEADS = ("tampering",)


@dataclass
class Row:
    """One student's result: ``cells`` maps each grade id to ``[score, max_score]``."""

    student: str
    student_id: str
    digest: str
    status: str
    reason: str = ""
    cells: dict = field(default_factory=dict)
    platform_id: str = ""  # the learning platform's id of the student (see submissions.py)
    platform: str = ""  # the platform that id comes from
    draw: dict = field(default_factory=dict)  # the concept questions the judge graded
    tampering: list = field(default_factory=list)  # leads for the instructor, never a score

    @property
    def total(self) -> float:
        return sum(score for score, _ in self.cells.values())


def write_csv(rows: list[Row], grade_cells: dict, path: Path) -> Path:
    """student, student_id, one column per exercise, total, max, status, reason, whose concept
    questions were graded, then what the code reaches for of the grader's machinery."""
    names = list(grade_cells)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CSV_FIXED, *names, *CSV_TAIL, *CSV_DRAW, *CSV_LEADS])
        for row in rows:
            writer.writerow([row.student, row.student_id,
                             *(f"{row.cells.get(n, [0.0])[0]:g}" for n in names),
                             f"{row.total:g}", f"{sum(grade_cells.values()):g}", row.status, row.reason,
                             row.draw.get("identity", ""), row.draw.get("status", ""),
                             row.draw.get("named", ""), " ".join(row.draw.get("questions", [])),
                             "; ".join(row.tampering)])
    return path


def identity_notes(rows: list[Row]) -> list[str]:
    """One line per notebook whose concept questions were not its own: for the instructor."""
    notes = {"another_student": "{student}: answered another student's questions ({named}'s); graded "
                                "on their own",
             "unknown": "{student}: its STUDENT_ID names no one in the class ({named!r}); graded on "
                        "that name's questions: look at it"}
    return [notes[row.draw["status"]].format(student=row.student, named=row.draw.get("named", ""))
            for row in rows if row.draw.get("status") in notes]


def summary(rows: list[Row], grade_cells: dict, out_dir: Path, flagged=()) -> tuple[str, Path]:
    """A table of counts and scores, and the score distribution drawn into ``scores.png``.

    ``flagged``: the exercises whose visible checks too many students passed while failing the
    hidden tests (:class:`graders.grade.item_analysis.Item`); each adds a line.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maximum = sum(grade_cells.values())
    totals = sorted(row.total for row in rows)
    by_status = {s: sum(r.status == s for r in rows) for s in STATUSES if any(r.status == s for r in rows)}
    mean = sum(totals) / len(totals) if totals else 0.0
    median = totals[len(totals) // 2] if totals else 0.0
    lines = ["| submissions | mean | median | min | max | " + " | ".join(by_status) + " |",
             "|---:|---:|---:|---:|---:|" + "---:|" * len(by_status),
             f"| {len(rows)} | {mean:.2f} / {maximum:g} | {median:g} | {totals[0] if totals else 0:g} | "
             f"{totals[-1] if totals else 0:g} | " + " | ".join(str(v) for v in by_status.values()) + " |"]
    lines += [f"flagged: {item.name}: {item.gap} of {item.students} students passed its visible checks "
              "and failed its hidden tests; the visible checks do not describe the task"
              for item in flagged]
    lines += identity_notes(rows)
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(totals, bins=[x - 0.5 for x in range(int(maximum) + 2)], color="tab:blue", edgecolor="white")
    ax.set_xlabel(f"score (max {maximum:g})")
    ax.set_ylabel("students")
    ax.set_title("Score distribution")
    fig.tight_layout()
    picture = out_dir / "scores.png"
    fig.savefig(picture, dpi=100)
    plt.close(fig)
    return "\n".join(lines), picture
