import math

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell

from course.metrics import METADATA_KEY, record_metric
from graders.run.report import metrics_from_notebook


def test_record_metric_shows_the_value_and_tags_it_for_the_report(monkeypatch):
    shown = []
    monkeypatch.setattr("course.metrics.display", lambda *args, **kwargs: shown.append((args, kwargs)))
    record_metric("accuracy", 91.25, unit="%")
    ((data,), options), = shown
    assert data == {"text/plain": "accuracy = 91.25 %"}
    assert options == {"raw": True, "metadata": {METADATA_KEY: {"name": "accuracy", "value": 91.25,
                                                                "unit": "%"}}}


def test_record_metric_checks_its_input():
    InteractiveShell.instance()
    with pytest.raises(ValueError, match="identifier"):
        record_metric("test accuracy", 1.0)
    with pytest.raises(TypeError, match="real number"):
        record_metric("flag", True)
    with pytest.raises(ValueError, match="finite"):
        record_metric("loss", math.nan)


def test_metrics_are_read_back_from_an_executed_notebook():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("...")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={"text/plain": "a = 1"},
                               metadata={METADATA_KEY: {"name": "a", "value": 1.0, "unit": ""}}),
        nbformat.v4.new_output("stream", name="stdout", text="noise"),
        nbformat.v4.new_output("display_data", data={"text/plain": "a = 2"},
                               metadata={METADATA_KEY: {"name": "a", "value": 2.0, "unit": ""}}),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# x"), cell]
    assert metrics_from_notebook(nb) == {"a": 2.0}
