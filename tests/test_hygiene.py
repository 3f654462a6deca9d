"""Contributor habits that pre-commit enforces, enforced again so CI catches a skipped hook."""

import importlib.util
import subprocess
import sys

import nbformat
import pytest
import yaml

from graders.lessons import ROOT
from graders.release.hygiene import committed_notebooks, dirty_notebooks, main

_spec = importlib.util.spec_from_file_location("commit_msg", ROOT / "tools" / "commit_msg.py")
commit_msg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(commit_msg)
# What a build makes, never committed (.gitignore keeps them out of `git add`).
BUILD_OUTPUTS = (".whl", ".egg", ".tar.gz", ".zip", ".pyc", ".so", ".o")


def test_committed_notebooks_carry_no_outputs():
    notebooks = committed_notebooks()
    assert notebooks
    assert dirty_notebooks(notebooks) == []


def test_hygiene_flags_and_fixes_a_notebook_with_outputs(tmp_path, capsys):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("1 + 1", execution_count=3)
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "2"},
                                           execution_count=3)]
    nb.cells = [cell]
    path = tmp_path / "dirty.ipynb"
    nbformat.write(nb, path)
    assert main([str(path)]) == 1
    assert "has outputs or execution counts" in capsys.readouterr().err
    assert main(["--fix", str(path)]) == 0
    assert dirty_notebooks([path]) == []


@pytest.mark.subprocess
def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_pre_commit_runs_the_same_checks():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook["entry"] for repo in config["repos"] for hook in repo["hooks"]}
    assert hooks["notebooks-without-outputs"].endswith("python -m graders.release.hygiene")
    assert hooks["ruff"].endswith("ruff check")
    assert hooks["commit-message"].endswith("tools/commit_msg.py")


@pytest.mark.subprocess
def test_no_build_output_is_committed():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert tracked.stdout.strip()
    built = [name for name in tracked.stdout.splitlines() if name.endswith(BUILD_OUTPUTS)]
    assert built == [], f"build outputs in git: {built}; `git rm --cached` them"


def test_a_commit_subject_over_72_characters_is_refused(tmp_path, capsys):
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("x" * 73 + "\n\nwhy\n")
    assert commit_msg.main([str(message)]) == 1
    assert "73 characters, more than 72" in capsys.readouterr().err
    message.write_text("Short subject\nno blank line\n")
    assert commit_msg.main([str(message)]) == 1
    assert "second line is not blank" in capsys.readouterr().err


def test_a_commit_subject_of_72_characters_with_a_body_passes(tmp_path):
    message = tmp_path / "COMMIT_EDITMSG"
    git_comment = "# Please enter the commit message for your changes." + "y" * 80
    message.write_text("x" * 72 + "\n\nThe why.\n" + git_comment)
    assert commit_msg.main([str(message)]) == 0
    assert commit_msg.problems("\n") != []
