"""A grading worker (``python -m graders.worker``): one JSON job per line in, one result out.

Each job grades one submission with stock nbgrader in a private course directory (a copy of the
lesson's source and of a template gradebook), executing it through :class:`ResilientExecute` in
the sandbox kernel. Nothing of one job is visible to the next.
"""

import json
import os
import re
import shutil
import sys
import time
import traceback
from pathlib import Path

from nbgrader.api import Gradebook
from traitlets.config import Config

from graders.config import apply
from graders.execution import INCIDENT

EXECUTOR = "graders.execution.ResilientExecute"


def grading_config(course_dir: Path, job: dict) -> Config:
    """The course's nbgrader config, executing through the resilient, sandboxed executor."""
    c = Config()
    apply(c, root=course_dir)
    steps = [EXECUTOR if step == "nbgrader.preprocessors.Execute" else step for step in (
        "nbgrader.preprocessors.Execute", "nbgrader.preprocessors.IgnorePattern",
        "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
        "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
        "nbgrader.preprocessors.CheckCellMetadata")]
    c.Autograde.autograde_preprocessors = steps
    c.ResilientExecute.timeout = job["cell_timeout"]
    c.ResilientExecute.notebook_timeout = job["notebook_timeout"]
    if job["sandbox"] != "off":
        c.ResilientExecute.kernel_name = job["kernel_name"]
        c.ResilientExecute.socket_root = job["socket_dir"]
        c.KernelManager.transport = "ipc"
    return c


def _last_error(log: str) -> str:
    """The last ``SomethingError: message`` line of an nbgrader log, the one that names the cause."""
    errors = re.findall(r"^\s*((?:\w+\.)*\w+(?:Error|Exception|Exit)\b.*)$", log, flags=re.MULTILINE)
    return errors[-1] if errors else (log.strip().splitlines() or ["(no log)"])[-1]


def grade(job: dict) -> dict:
    """Autograde one submission and generate its feedback; returns what the parent needs."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    start = time.perf_counter()
    lesson, sid = job["lesson"], job["student_id"]
    course_dir = Path(job["work_dir"]) / "course"
    if course_dir.exists():
        shutil.rmtree(course_dir)
    shutil.copytree(Path(job["master"]) / "source" / lesson, course_dir / "source" / lesson)
    shutil.copyfile(job["template_db"], course_dir / "gradebook.db")
    submitted = course_dir / "submitted" / sid / lesson
    submitted.mkdir(parents=True)
    shutil.copyfile(job["notebook"], submitted / f"{lesson}.ipynb")

    config = grading_config(course_dir, job)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    result = api.autograde(lesson, sid, force=True, create=True)
    if not result["success"]:
        print(result.get("log", ""), file=sys.stderr, flush=True)  # the whole story, in the worker's log
        raise RuntimeError(f"nbgrader autograde failed: {_last_error(result.get('log', ''))}")
    feedback = api.generate_feedback(lesson, sid, force=True)
    if not feedback["success"]:
        raise RuntimeError(f"nbgrader generate_feedback failed: {feedback.get('error')}")

    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(lesson, lesson, sid)
        cells = {g.name: [g.score, g.max_score] for g in notebook.grades}
    autograded = course_dir / "autograded" / sid / lesson / f"{lesson}.ipynb"
    incidents = [o["evalue"] for c in json.loads(autograded.read_text())["cells"]
                 for o in c.get("outputs", []) if o.get("ename") == INCIDENT]
    return {"cells": cells, "incidents": sorted(set(incidents)),
            "autograded": str(autograded),
            "feedback": str(course_dir / "feedback" / sid / lesson / f"{lesson}.html"),
            "seconds": time.perf_counter() - start}


RESULT = "@@course-result "


def _reap_children() -> None:
    """Collect exited kernel launchers, so a worker grading hundreds of notebooks leaves no zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> int:
    for line in sys.stdin:
        job = json.loads(line)
        os.environ["JUPYTER_PATH"] = job["jupyter_path"]
        try:
            reply = {"job": job["job"], "ok": True, **grade(job)}
        except Exception:  # reported to the parent, which records the submission as failed
            reply = {"job": job["job"], "ok": False, "error": traceback.format_exc(limit=5)}
        _reap_children()
        # Libraries may print too: the parent reads only lines that carry this prefix.
        sys.stdout.write(RESULT + json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
