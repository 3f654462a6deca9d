"""Contributor habits that pre-commit enforces, enforced again so CI catches a skipped hook."""

import subprocess
import sys

import nbformat
import pytest
import yaml

from graders.lessons import ROOT
from graders.release.hygiene import committed_notebooks, dirty_notebooks, main


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
