"""graders/grade/tampering.py: code that reaches for the grader's machinery, found by reading it; an
honest answer, however written, is never a lead."""

import pytest
from hostile import ALWAYS_EQUAL, HOOKS, TAMPER, solved
from lesson_files import LESSONS, replace_cell, solved_edition, write

from graders.grade.tampering import findings
from graders.lessons import LANGUAGES, edition_path

LESSON = "01_tensors"
ANSWER = "def to_unit_float(images):\n    return images.float() / 255\n"
ATTACKS = {
    **HOOKS,
    "monkeypatched checks": TAMPER,
    "__eq__ always True": ALWAYS_EQUAL,
    "message layer": "from jupyter_client.session import Session\nSession.send = lambda *a, **k: None\n",
    "lying subclass": ("import torch\nclass Liar(torch.Tensor):\n    @classmethod\n"
                       "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                       "        return True\n"),
    "audit hook through a string": 'import sys\ngetattr(sys, "addaudithook")(lambda event, args: None)\n',
    "frames": "import sys\nanswers = sys._getframe(1).f_globals\n",
    "gc": "import gc\nsheets = [o for o in gc.get_objects() if isinstance(o, dict)]\n",
    "claimed identity": 'import os\nos.environ["COURSE_SUBMITTER"] = \'["ana"]\'\n',
    "roster": 'import os\nprint(os.environ.get("COURSE_ROSTER"))\n',
    "code built at run time": 'exec("import sy" + "s")\n',
}


@pytest.mark.parametrize("attack", ATTACKS, ids=list(ATTACKS))
def test_each_attack_on_the_machinery_is_a_lead(tmp_path, attack):
    attacked = replace_cell(solved(), "to_unit_float", ATTACKS[attack] + "\n" + ANSWER)
    path = write(attacked, tmp_path / "x.ipynb")
    assert findings(path, edition_path(LESSON, "en"))


@pytest.mark.parametrize(("lesson", "language"), [(lesson, language) for lesson in LESSONS
                                                  for language in LANGUAGES])
def test_the_reference_answers_of_every_lesson_are_no_lead(tmp_path, lesson, language):
    path = write(solved_edition(lesson, language), tmp_path / "x.ipynb")
    assert findings(path, edition_path(lesson, language)) == []


@pytest.mark.parametrize("answer", [
    "def to_unit_float(images):\n    return images / 255.0\n",
    "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True  # a switch torch documents\n" + ANSWER,
    'def to_unit_float(images):\n    print("stack the modules, then eval the model")\n'
    "    return images.to(torch.float32).div(255)\n",
])
def test_an_honest_answer_written_another_way_is_no_lead(tmp_path, answer):
    path = write(replace_cell(solved(), "to_unit_float", answer), tmp_path / "x.ipynb")
    assert findings(path, edition_path(LESSON, "en")) == []


def test_a_file_that_is_not_a_notebook_is_left_to_the_validation(tmp_path):
    (tmp_path / "x.ipynb").write_text("{")
    assert findings(tmp_path / "x.ipynb", edition_path(LESSON, "en")) == []
