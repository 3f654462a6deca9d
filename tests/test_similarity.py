"""Similarity of solution cells: copies found, honest solutions and the template left alone."""

import json

import pytest
from copydetect import compare_files
from lesson_files import read_edition
from solution_styles import HARD_CODED, LESSON, STYLES, notebook, renamed

from graders.grade import similarity


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
