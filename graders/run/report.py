"""The course run's report: ``report.json``, ``report.md`` and the metrics lessons recorded."""

import json
from pathlib import Path

from course.metrics import METADATA_KEY


def metrics_from_notebook(nb) -> dict:
    """Every metric a lesson recorded, read back from its executed notebook (last value wins)."""
    found = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            tag = output.get("metadata", {}).get(METADATA_KEY)
            if tag:
                found[tag["name"]] = tag["value"]
    return found


def format_table(report: dict) -> str:
    """The report as a Markdown table: lesson, device, seconds, score / max, status."""
    rows = ["| lesson | device | seconds | score / max | status |", "|---|---|---:|---:|---|"]
    for lesson in report["lessons"]:
        status = "FAILED: " + lesson["error"].replace("|", "\\|") if lesson["error"] else "ok"
        rows.append(f"| {lesson['name']} | {report['device']} | {lesson['seconds']:.1f} | "
                    f"{lesson['score']:g} / {lesson['max_score']:g} | {status} |")
    return "\n".join(rows)


def format_metrics(report: dict) -> str:
    lines = [f"- {lesson['name']}: {name} = {value:.4g}"
             for lesson in report["lessons"] for name, value in lesson["metrics"].items()]
    return "\n".join(lines) or "- (none recorded)"


def write_report(report: dict, out_dir: Path) -> None:
    """``report.json`` (for machines) and ``report.md`` (for people) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    mode = "FAST=1" if report["fast"] else "FAST=0"
    markdown = (f"# Course run ({mode}, torch {report['torch']})\n\n{format_table(report)}\n\n"
                f"## Metrics\n\n{format_metrics(report)}\n")
    (out_dir / "report.md").write_text(markdown)
