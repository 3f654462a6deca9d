"""Similarity of solution cells: copies found, of each other, of the reference solution and of earlier
terms; honest solutions and the template left alone."""

import json

import nbformat
import pytest
from copydetect import compare_files
from lesson_files import read_edition, solved_edition
from solution_styles import HARD_CODED, LESSON, STYLES, notebook, renamed

from graders import cli
from graders.grade import similarity
from graders.grade.results import Row
from graders.grade.submissions import find_submissions, student_id


def _as_dict(nb) -> dict:
    return json.loads(json.dumps(nb))


@pytest.fixture(scope="module")
def template() -> dict:
    return _as_dict(read_edition(LESSON, "en"))


def _codes(template, notebooks: dict) -> dict:
    ids = similarity.solution_ids(template)
    return {name: similarity.solution_code(_as_dict(nb), ids) for name, nb in notebooks.items()}


@pytest.fixture(scope="module")
def report(template):
    original = STYLES["step_by_step"]
    notebooks = {
        "Ana (honest)": notebook(original),
        "Ben (honest)": notebook(STYLES["library_calls"], "es"),
        "Eve (honest)": notebook({**STYLES["terse"], "pairwise_distances": HARD_CODED[0]}),
        "Chen (exact copy of Ana)": notebook(original, "es"),
        "Dana (renamed copy of Ana)": notebook(renamed(original)),
        "Femi (template untouched)": read_edition(LESSON, "es"),
    }
    prints = similarity.fingerprints(_codes(template, notebooks), similarity.template_code(template))
    return prints, similarity.compare(prints, similarity.DEFAULT_THRESHOLD)


def test_copies_are_listed_and_honest_solutions_are_not(report):
    _, pairs = report
    listed = {frozenset((p.a, p.b)) for p in pairs}
    assert listed == {frozenset(("Ana (honest)", "Chen (exact copy of Ana)")),
                      frozenset(("Ana (honest)", "Dana (renamed copy of Ana)")),
                      frozenset(("Chen (exact copy of Ana)", "Dana (renamed copy of Ana)"))}, \
        [(p.a, p.b, round(p.similarity, 2)) for p in pairs]
    exact = next(p for p in pairs if "Chen" in p.a + p.b and "Ana" in p.a + p.b)
    assert exact.share_a == exact.share_b == 1.0  # the comment lines naming cells are not code


def test_honest_pairs_stay_well_below_the_threshold(report):
    prints, _ = report
    honest = ["Ana (honest)", "Ben (honest)", "Eve (honest)"]
    for i, a in enumerate(honest):
        for b in honest[i + 1:]:
            _, (share_a, share_b), _ = compare_files(prints[a], prints[b])
            assert max(share_a, share_b) < similarity.DEFAULT_THRESHOLD - 0.1, (a, b, share_a, share_b)


def test_the_untouched_template_has_no_code_of_its_own(report):
    prints, _ = report
    assert "Femi (template untouched)" not in prints
    assert len(prints) == 5


def test_solution_code_keeps_the_templates_order_and_only_solution_cells(template):
    nb = _as_dict(notebook(STYLES["terse"]))
    nb["cells"].reverse()  # a student who moved cells around
    code = similarity.solution_code(nb, similarity.solution_ids(template))
    headers = [line for line in code.splitlines() if line.startswith("# --- ")]
    assert headers == [f"# --- {name} ---" for name in similarity.solution_ids(template)]
    assert "checks.check_close" not in code  # grade cells are not solution cells


def test_the_page_says_it_is_a_lead_and_shows_passages_side_by_side(report, tmp_path):
    _, pairs = report
    pairs[0].a = "<script>alert(1)</script>"
    page = similarity.write_html(similarity.SimilarityReport(LESSON, 0.5, 5, pairs), tmp_path / "s.html")
    html = page.read_text()
    assert "A lead for a human, not a verdict" in html
    assert html.count("class='side'") == len(pairs) == 3
    assert "<mark>" in html and "<script>alert" not in html


def test_a_threshold_outside_zero_to_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="between 0 and 1"):
        similarity.analyse(tmp_path, LESSON, [], threshold=50)


def test_only_the_most_similar_pairs_show_their_passages(report, tmp_path):
    prints, _ = report
    pairs = similarity.compare(prints, similarity.DEFAULT_THRESHOLD, detailed=1)
    assert [bool(p.passages_a) for p in pairs] == [True, False, False]
    assert pairs[0].similarity >= pairs[1].similarity >= pairs[2].similarity
    page = similarity.write_html(similarity.SimilarityReport(LESSON, 0.5, 5, pairs), tmp_path / "s.html")
    html = page.read_text()
    assert html.count("class='side'") == 1 and "shown for the 1 most similar pairs" in html
    assert html.count("<tr><td><a href=") == 3  # the table still lists all three


def test_a_paste_of_the_reference_is_named_and_honest_answers_are_not(template):
    notebooks = {"Ana (honest)": notebook(STYLES["step_by_step"]),
                 "Ben (honest)": notebook(STYLES["library_calls"], "es"),
                 "Eve (honest)": notebook(STYLES["terse"]),
                 "Rex (pasted the reference)": solved_edition(LESSON, "es")}
    boilerplate = similarity.template_code(template)
    prints = similarity.fingerprints(_codes(template, notebooks), boilerplate)
    reference = similarity.fingerprints(
        {similarity.REFERENCE: similarity.reference_code(LESSON, similarity.solution_ids(template))},
        boilerplate)
    pairs = similarity.compare_with(reference, prints, similarity.DEFAULT_THRESHOLD)
    assert [(p.a, p.b, p.share_a) for p in pairs] == [("Rex (pasted the reference)", "reference solution", 1)]
    assert "<mark>" in pairs[0].passages_b


@pytest.fixture
def earlier_terms(tmp_path):
    """A class of this term graded in a course directory, and a flat folder of an earlier term's
    notebooks in which two students handed in the same one."""
    course = tmp_path / "nbgrader"
    release = course / "release" / LESSON / f"{LESSON}.ipynb"
    release.parent.mkdir(parents=True)
    nbformat.write(read_edition(LESSON, "en"), release)
    current = {"Chen (renamed copy)": notebook(renamed(STYLES["step_by_step"])),
               "Ben (honest)": notebook(STYLES["library_calls"], "es"),
               "Rex <b>(pasted it)</b>": solved_edition(LESSON, "en")}
    rows = []
    for name, nb in current.items():
        path = course / "submitted" / student_id(name) / LESSON / f"{LESSON}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
        rows.append(Row(name, student_id(name), "", "graded"))
    earlier = tmp_path / "fall"
    earlier.mkdir()
    for name in ("Ana", "Zoe <script>"):
        nbformat.write(notebook(STYLES["step_by_step"], "es"), earlier / f"{name}.ipynb")
    found = find_submissions(earlier, LESSON, tmp_path / "scratch")
    return similarity.analyse(course, LESSON, rows, earlier=found)


def test_a_copy_of_an_earlier_term_names_its_student_and_earlier_ones_are_not_compared(earlier_terms):
    report = earlier_terms
    assert (report.compared, report.earlier_compared) == (3, 2)  # the earlier term is not graded
    assert {(p.a, p.b) for p in report.earlier} == {("Chen (renamed copy)", "earlier: Ana"),
                                                      ("Chen (renamed copy)", "earlier: Zoe <script>")}
    # Ana's and Zoe's notebooks are identical: never compared, they would be listed
    assert [(p.a, p.b) for p in report.reference] == [("Rex <b>(pasted it)</b>", "reference solution")]
    assert report.pairs == []


def test_the_page_and_its_summary_have_a_section_for_each_source(earlier_terms, tmp_path):
    page = similarity.write_html(earlier_terms, tmp_path / "s.html").read_text()
    assert "0 pair(s) of students above 50%, 1 submission(s) like the reference solution, 2 like an " \
        "earlier term's submission." in page
    sections = page.split("<h2 ")[1:]
    assert [s.split("</h2>")[0] for s in sections] == [
        'id="students">Between students', 'id="reference">Copies of the reference solution',
        'id="earlier">Copies of earlier terms']
    assert "Rex &lt;b&gt;(pasted it)&lt;/b&gt;" in sections[1]
    assert "earlier: Zoe &lt;script&gt;" in sections[2] and "<script>" not in page
    assert page.count("class='side'") == 3


def test_without_earlier_terms_the_page_says_how_to_give_them(report, tmp_path):
    _, pairs = report
    page = similarity.write_html(similarity.SimilarityReport(LESSON, 0.5, 5, pairs), tmp_path / "s.html")
    assert "earlier terms not given" in page.read_text() and "--earlier-submissions DIR" in page.read_text()


def test_a_missing_earlier_folder_is_named_before_any_grading(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["grade", str(tmp_path), "--lesson", LESSON, "--earlier-submissions", str(tmp_path / "x")])
    assert stop.value.code == 2
    assert f"{tmp_path / 'x'} does not exist: give earlier terms' submissions" in capsys.readouterr().err
