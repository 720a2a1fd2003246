"""A paper's claims page: the verdict counts of its rows and the markdown table that claims.md, claims.html
and the report show (reporting/claims.py evaluates the rows)."""

from __future__ import annotations

from xcbench.reporting.labels import pretty


def bare_verdict(verdict: str) -> str:
    """A row's verdict less the bracket `_row` adds (its why_not / caveat): "held", "not held, partial: ...", ..."""
    return verdict.split(" (at the ", 1)[0]


def verdict_counts(rows: list[dict]) -> dict[str, int]:
    """held / not held / partial (a verdict evaluated over the runs present) / not testable / not run."""
    out = {"held": 0, "not held": 0, "partial": 0, "not testable": 0, "not run": 0}
    for r in rows:
        v = bare_verdict(r["verdict"])
        key = ("partial" if ", partial" in v else "not testable" if v.startswith("not testable")
               else "held" if v == "held" else "not held" if v.startswith("not held") else "not run")
        out[key] += 1
    return out


def claims_markdown(res: dict) -> str:
    claims = [r for r in res["rows"] if not r.get("setup_check")]
    checks = [r for r in res["rows"] if r.get("setup_check")]
    n = verdict_counts(claims)
    kept = " Kept results tree: only the claims whose runs it holds." if res.get("kept") else ""
    counts = ", ".join(f"{v} {k}" for k, v in n.items() if v and k != "held")
    lines = [f"# Claims: {res['title']}", "", f"Scale: {res['scale']}. {n['held']}/{len(claims)} claims of the paper held"
             + (f" ({counts})" if counts else "") + f".{kept}", "",
             "| claim | dataset | check | paper | ours | verdict |", "|---|---|---|---|---|---|"]
    row = lambda r: (f"| {r['claim']} | {pretty(r['dataset'])} | {r['check']} | {r['paper']} | {r['ours']} | "  # noqa: E731
                     f"**{r['verdict']}** |")
    lines += [row(r) for r in claims]
    if checks:
        lines += ["", "## Checks of the setup", "", "Not claims of the paper, so not counted above: they test that the runs "
                  "are set up as the paper's (initial losses, sizes).", "",
                  "| check | dataset | rule | paper | ours | verdict |", "|---|---|---|---|---|---|"]
        lines += [row(r) for r in checks]
    return "\n".join(lines) + "\n"
