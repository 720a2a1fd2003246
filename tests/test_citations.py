"""Every benchmark output or study path that the repository cites (captions, notes, docs, docstrings)
exists: a moved or renamed output fails here, not in a reader's hands."""

from __future__ import annotations

import itertools
import re
import subprocess

import pytest
from conftest import REPO

CITED = re.compile(r"(?<![\w/.])((?:benchmarks/out|studies)/[\w./{},-]*[\w}])")
TEXT = {".py", ".md", ".yaml", ".yml", ".sh", ".smk", ".toml", ".txt"}


def expand(path: str) -> list[str]:
    """`a/{b,c}.md` -> [a/b.md, a/c.md] (every brace group, in order)."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def cited_paths(text: str) -> set[str]:
    out = set()
    for m in CITED.finditer(text):
        for p in expand(m.group(1)):
            p = p.rstrip(".,_")  # a sentence's full stop, a Markdown italic caption's closing _
            if p.endswith("/out") or p in ("studies", "benchmarks/out"):
                continue
            out.add(p)
    return out


def _tracked() -> list[str]:
    try:
        r = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [f for f in r.stdout.split() if f[f.rfind("."):] in TEXT and "/results/" not in f
            and f != "tests/test_citations.py"]  # its own examples


def test_expand_and_find():
    assert expand("studies/x/out/a_{pq,rq}.{json,md}") == ["studies/x/out/a_pq.json", "studies/x/out/a_pq.md",
                                                           "studies/x/out/a_rq.json", "studies/x/out/a_rq.md"]
    assert cited_paths("see `benchmarks/out/paper_cost.md`, and studies/hf_prefilter/README.md.") == {
        "benchmarks/out/paper_cost.md", "studies/hf_prefilter/README.md"}
    assert cited_paths("writes benchmarks/out/<name>.{json,md}") == set()  # a pattern, not a path
    assert cited_paths("_Cost: benchmarks/out/paper_cost.md._") == {"benchmarks/out/paper_cost.md"}  # a caption's end


def test_every_cited_output_exists():
    missing = []
    for f in _tracked():
        text = (REPO / f).read_text(encoding="utf-8", errors="replace")
        for p in sorted(cited_paths(text)):
            if not (REPO / p).exists() and not any((REPO / p).parent.glob((REPO / p).name + "*")):
                missing.append(f"{f}: {p}")
    assert not missing, "cited paths that do not exist:\n  " + "\n  ".join(missing)
