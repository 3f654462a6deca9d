"""Recording what a lesson measured, so that ``course run`` can put it in ``build/report.json``.

Taught in lesson 04 (training_loop), section 9; also used by lessons 01 (tensors), 02 (autograd),
03 (modules), 06 (mixed_precision) and 07 (scale).

A metric travels inside the executed notebook, as the metadata of a displayed output:
no side files, and the notebook that papermill saved is the single record of the run.
"""

import math
import numbers

from IPython.display import display

METADATA_KEY = "course_metric"


def record_metric(name: str, value: float, unit: str = "") -> None:
    """Show ``name = value`` and tag it for the report."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"A metric name must look like a Python identifier, got {name!r}.")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"Metric {name!r} must be a real number, got {type(value).__name__}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"Metric {name!r} is {value}: only finite numbers go in the report.")
    text = f"{name} = {value:.4g}{(' ' + unit) if unit else ''}"
    display(
        {"text/plain": text},
        raw=True,
        metadata={METADATA_KEY: {"name": name, "value": value, "unit": unit}},
    )
