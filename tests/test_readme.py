"""The README's Python example runs as written, with torch alone (no Snakemake import)."""

import re
import subprocess
import sys

import pytest
from conftest import REPO


def test_readme_head_example_runs_with_torch_alone():
    text = (REPO / "README.md").read_text()
    code = re.search(r"<!-- readme-example -->\n```python\n(.*?)```", text, re.S).group(1)
    check = code + "\nimport sys\nassert logits.shape == (256, n) and loss.item() > 0\n" \
                   "assert 'snakemake' not in sys.modules and 'matplotlib' not in sys.modules\n"
    r = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_head_forward_needs_prepare_and_equals_loss():
    import torch

    from xcbench.registry import HEADS
    head = HEADS.get("full_softmax")(4, 7, torch.Generator().manual_seed(0))
    h, y = torch.randn(3, 4), torch.tensor([0, 5, 2])
    assert torch.equal(head(h), head.scores(h))
    try:
        head(h, y)
        raise AssertionError("forward(h, y) before prepare must raise")
    except RuntimeError as e:
        assert "prepare" in str(e)
    head.prepare(torch.ones(7))
    assert torch.allclose(head(h, y), head.loss(h, y, torch.arange(3), torch.Generator()))


def test_readme_headline_rows_are_the_kept_trees_claims():
    """The README's headline region is exactly what `xcbench rerender --readme` writes from the kept
    reference tree's claims (no hand-typed numbers)."""
    from xcbench.reporting.report import HEADLINE_END, HEADLINE_START, headlines_markdown
    text = (REPO / "README.md").read_text()
    region = text.split(HEADLINE_START, 1)[1].split(HEADLINE_END, 1)[0]
    kept = sorted((REPO / "reference" / "paper" / "figures").glob("*/claims.json"))
    assert region.strip() == headlines_markdown(kept).strip()
    assert region.count("\n|") >= 2, "no headline row: quote the abstract in claims (`abstract:`) and rerender"


def test_readme_is_a_front_page_whose_tables_render():
    """At most ~150 lines and 15 KB; no line over 200 characters outside code blocks and the generated
    headline rows; every table's rows follow a header and a separator (a blank line inside a table
    turns its remaining rows into raw text)."""
    import re

    from xcbench.reporting.report import HEADLINE_END, HEADLINE_START
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150 and len(text.encode()) <= 15_000
    before, rest = text.split(HEADLINE_START, 1)
    prose = re.sub(r"```.*?```", "", before + rest.split(HEADLINE_END, 1)[1], flags=re.S)
    assert [ln for ln in prose.splitlines() if len(ln) > 200] == []
    lines = re.sub(r"```.*?```", "", text, flags=re.S).splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("|") and not (i and lines[i - 1].startswith("|")):  # a table's first line
            assert i + 1 < len(lines) and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1]), f"README line {ln!r}"


PAGES = sorted(p.relative_to(REPO).as_posix() for p in [*REPO.glob("docs/*.md"), *REPO.glob("studies/**/README.md")])


@pytest.mark.parametrize("page", PAGES)
def test_doc_tables_render(page):
    """Every table of the docs and study pages starts with a header and a separator, and ends at a blank line
    (a blank line inside a table turns its remaining rows into raw text; text right under a table becomes a row)."""
    import re

    lines = re.sub(r"```.*?```", "", (REPO / page).read_text(), flags=re.S).splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("|") and not (i and lines[i - 1].startswith("|")):  # a table's first line
            assert i + 1 < len(lines) and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1]), f"{page}: {ln[:80]!r}"
        if i and lines[i - 1].startswith("|") and ln.strip() and not ln.startswith("|"):
            raise AssertionError(f"{page}: text right under a table: {ln[:80]!r}")


def test_write_headlines_fills_the_region_of_its_scale(tmp_path):
    """The paper scale writes the headline region, another scale only its own counts region; counts by hand:
    p1 has 1 held, 1 partial, 1 not testable and a setup check (not counted); p2 1 not held and 1 not run."""
    from xcbench.io import write_json
    from xcbench.reporting.report import readme_region, write_headlines

    rows1 = [{"claim": "a", "dataset": "d", "paper": "1", "ours": "2", "verdict": "held", "headline": True},
             {"claim": "b", "dataset": "d", "paper": "1", "ours": "2", "verdict": "held, partial: no run of x"},
             {"claim": "c", "dataset": "d", "paper": "1", "ours": "–", "verdict": "not testable: one seed"},
             {"claim": "s", "dataset": "d", "paper": "1", "ours": "2", "verdict": "not held", "setup_check": True}]
    rows2 = [{"claim": "e", "dataset": "d", "paper": "1", "ours": "2", "verdict": "not held (at the quick scale: why)"},
             {"claim": "f", "dataset": "d", "paper": "1", "ours": "–", "verdict": "not at this scale"}]
    files = [tmp_path / "p1.json", tmp_path / "p2.json"]
    write_json(files[0], {"paper": "p1", "rows": rows1})
    write_json(files[1], {"paper": "p2", "rows": rows2})
    readme = tmp_path / "README.md"
    readme.write_text("top\n<!-- headlines:start -->\nold\n<!-- headlines:end -->\nmid\n"
                      "<!-- claims-quick:start -->\nold\n<!-- claims-quick:end -->\nend\n")
    write_headlines(files, readme, "quick")
    text = readme.read_text()
    assert "<!-- headlines:start -->\nold\n<!-- headlines:end -->" in text and text.endswith("end\n")
    assert "| p1 | 3 | 1 | 0 | 1 | 1 | 0 |" in text and "| p2 | 2 | 0 | 1 | 0 | 0 | 1 |" in text
    assert readme_region(files, "quick") in text and "reference/quick" in text
    write_headlines(files, readme, "paper")
    assert "| p1 | a | d | 1 | 2 | held |" in readme.read_text()
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="claims-quick:start"):
        write_headlines(files, readme, "quick")


def test_readme_quick_counts_are_the_quick_kept_trees_claims():
    """The README's quick-scale counts are what `xcbench rerender --root reference/quick --scale quick --readme`
    writes from the kept quick tree (every paper and the package's own benchmark present)."""
    from xcbench.reporting.report import readme_region, region_markers
    start, end = region_markers("quick")
    text = (REPO / "README.md").read_text()
    region = text.split(start, 1)[1].split(end, 1)[0]
    kept = sorted((REPO / "reference" / "quick" / "figures").glob("*/claims.json"))
    assert {p.parent.name for p in kept} >= {"scent", "sparse", "class_selection", "midx", "rff", "xcbench"}
    assert region.strip() == readme_region(kept, "quick").strip()
