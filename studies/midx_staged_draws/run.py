"""MIDX's draw over the K^2 cells against its staged draw (codeword 1, then codeword 2), side by side.

1. The draw alone (`draws`): `sample_with` of midx_pq and midx_rq at Figure 3(b)'s shapes (PTB: n = 10^4,
   d = 200, B = 700 queries of a batch, m = 20 draws each), K = 8 .. 128, both forms on the same index, the
   fastest of --rounds rounds of a median over --repeats calls; one thread. Beside it, Full's logits and
   their log-sum-exp (the (B, d) x (d, n) product Full's step makes), and the largest |log q| difference.
2. Whole training steps (`steps`): benchmarks/train_step.py over a copy of Figure 3(b)'s experiment with
   a `<method>_cells` twin (draw: cells) of every method that draws in stages and Table 4's Full, in one run.

    python studies/midx_staged_draws/run.py draws            # about a minute
    python studies/midx_staged_draws/run.py steps            # about 9 minutes (17 methods; needs data/processed/ptb)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from common import timed, write_outputs  # noqa: E402

FULL = '  full: {label: "Full (Table 4)", head: normalized_softmax, params: {normalize: false, init_std: 0.01}}'
OUT = Path(__file__).resolve().parent / "out"


def ms(f, repeats: int) -> float:
    """Median ms of `repeats` calls after a warm-up call (benchmarks/common.timed, on the CPU)."""
    return 1e3 * timed(f, repeats, sync=lambda: None, warmup=1)


def draws(a) -> None:
    import xcbench.samplers  # noqa: F401 - registers the samplers
    from xcbench.registry import SAMPLERS

    torch.set_num_threads(1)
    n, d, B, m = 10_000, 200, 700, 20
    g = torch.Generator().manual_seed(0)
    # scores of spread ~3.5 (h.c: d = 200 terms of N(0, 1) x N(0, 0.25^2)): no float32 exp underflows into
    # denormals here, which alone made Full's log-sum-exp 20x slower at a spread of ~13 (README)
    c, h = torch.randn(n, d, generator=g) * 0.25, torch.randn(B, d, generator=g)        # (n, d), (B, d)
    t, W = torch.randint(0, n, (B, 1), generator=g), torch.randn(n, d, generator=g) * 0.25
    rows = []
    for name in ("midx_pq", "midx_rq"):
        for K in a.K:
            s = {form: SAMPLERS.get(name)(n, K=K, draw=form) for form in ("cells", "stages")}
            for form in s:
                s[form].update(c, torch.Generator().manual_seed(1))                    # the same k-means index
            ids = torch.randint(0, n, (B, 50), generator=g)
            diff = (s["cells"].log_prob(h, ids) - s["stages"].log_prob(h, ids)).abs().max().item()
            best = {f: min(ms(lambda: s[f].sample_with(h, m, torch.Generator().manual_seed(2), t), a.repeats)
                           for _ in range(a.rounds)) for f in s}
            full = min(ms(lambda: torch.logsumexp(h @ W.T, 1), a.repeats) for _ in range(a.rounds))
            rows.append({"sampler": name, "K": K, "cells_ms": best["cells"], "stages_ms": best["stages"],
                         "full_logits_ms": full, "max_abs_log_q_diff": diff})
            print(json.dumps(rows[-1]), flush=True)
    lines = ["# MIDX draw over the K^2 cells against the staged draw (one thread)", "",
             f"`sample_with` (m = {m} draws for each of B = {B} queries and the targets' log q), n = {n:,}, d = {d}; "
             "Full: the (B, d) x (d, n) logits and their log-sum-exp. Fastest of "
             f"{a.rounds} rounds of a median over {a.repeats} calls; {torch.get_num_threads()} thread.", "",
             "| sampler | K | K^2 / n | cells ms | stages ms | cells / stages | Full's logits ms | max abs log q difference |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['sampler']} | {r['K']} | {r['K'] ** 2 / n:.2f} | {r['cells_ms']:.1f} | {r['stages_ms']:.1f} | "
                     f"{r['cells_ms'] / r['stages_ms']:.2f}x | {r['full_logits_ms']:.1f} | {r['max_abs_log_q_diff']:.1e} |")
    write_outputs("draws", rows, "\n".join(lines), OUT)
    print("\n".join(lines))


def steps(a) -> None:
    src = REPO / "config" / "experiments" / "midx"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "table4.yaml").write_text((src / "table4.yaml").read_text())
        # Table 4's Full (the same LSTM and batch) beside them, the step the sampled ones are held to
        text, twins, methods = (src / "fig3b.yaml").read_text(), [FULL], ["full"]
        for line in text.splitlines():
            hit = re.match(r"  (\w+): (\{.*, draw: stages\}.*)$", line)
            if hit:
                twins.append(f"  {hit[1]}_cells: " + hit[2].replace(", draw: stages", "").replace('label: "', 'label: "cells: '))
                methods += [hit[1], f"{hit[1]}_cells"]
        (Path(tmp) / "fig3b.yaml").write_text(text.replace("notes: >-", "\n".join(twins) + "\nnotes: >-"))
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "train_step.py"), "--experiment", f"{tmp}/fig3b.yaml",
                        "--scale", "paper", "--dataset", "ptb", "--processed", a.processed, "--threads", "1",
                        "--steps", "10", "--methods", *methods, "--out-dir", str(OUT), "--name", "train_step_fig3b_draws",
                        "--note", a.note], check=True, cwd=REPO)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["draws", "steps"])
    p.add_argument("--K", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--processed", default="data/processed/ptb/dataset.npz")
    p.add_argument("--note", default="")
    a = p.parse_args()
    {"draws": draws, "steps": steps}[a.what](a)
