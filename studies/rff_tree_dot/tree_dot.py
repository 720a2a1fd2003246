"""Where the RFF kernel tree's descent spends its time, and what a cheaper product at its deep levels would change.

At a deep level every draw reads the left-child sum S_j (a row of 2D floats) of its own node and takes phi(h) . S_j:
`KernelTree._left_mass` gathers the rows (F.embedding, (B, m, 2D)) and multiplies them with phi(h) in one batched
product (torch.bmm, B products of (m, 2D) x (2D, 1)). The same masses come from an element-wise product and a sum over
the feature axis, in another summation order. This script times, at the settings of the kept runs (one thread):

  - the whole draw (`RFF.sample`) as kept, and with the deep levels' bmm replaced by mul + sum;
  - one deep level's gather, bmm and mul + sum apart;
  - how many of the draws change with the other summation order (the same seed and tree).

    python studies/rff_tree_dot/tree_dot.py            # writes studies/rff_tree_dot/out/tree_dot.{json,md}
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from xcbench.io import write_json, write_text
from xcbench.samplers.kernel_tree import DENSE_PER_DRAW, GATHER_BYTES
from xcbench.samplers.random_features import RFF

OUT = Path(__file__).resolve().parent / "out"
# (name, classes n, width d, queries B, draws m, random features D): the kept runs' settings
SETTINGS = [
    ("MIDX Table 4, LSTM, PTB", 10_000, 128, 20 * 35, 20, 256),
    ("RF-softmax Fig. 1-3, PTB", 10_000, 200, 32 * 35, 100, 1024),
]


class RFFMulSum(RFF):
    """RFF whose gathered (deep) levels take phi(h) . S_j as mul + sum instead of bmm: the same masses up to rounding."""

    def _left_mass(self, ph, node, lvl):
        S = self.left[lvl + 1]
        limit = self.dense_nodes if self.dense_nodes is not None else DENSE_PER_DRAW * node.shape[1]
        if S.shape[0] <= limit:
            return super()._left_mass(ph, node, lvl)
        rows = max(1, GATHER_BYTES // (node.shape[1] * S.shape[1] * S.element_size()))     # queries a chunk, as kept
        out = ph.new_empty(node.shape)                                                     # (B, m)
        for b in range(0, node.shape[0], rows):
            out[b:b + rows] = (F.embedding(node[b:b + rows], S) * ph[b:b + rows].unsqueeze(1)).sum(2)
        return out


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def measure(name, n, d, B, m, D, repeats):
    g = torch.Generator().manual_seed(0)
    C, h = torch.randn(n, d, generator=g), torch.randn(B, d, generator=g)
    kept, other = RFF(n, D=D), RFFMulSum(n, D=D)
    kept.update(C)
    other.update(C)
    draw = lambda s: s.sample(h, m, torch.Generator().manual_seed(1))                  # noqa: E731
    (i_kept, q_kept), (i_other, q_other) = draw(kept), draw(other)
    # the deepest level alone: every draw's node there, its left child's row and phi(h)
    ph, _ = kept._start(h, m)
    S = kept.left[kept.depth]                                                              # (2^(depth-1), 2D)
    node = i_kept // 2
    deep = [lvl for lvl in range(kept.depth) if kept.left[lvl + 1].shape[0] > DENSE_PER_DRAW * m]
    row = {
        "setting": name, "n": n, "d": d, "B": B, "m": m, "D": D, "deep_levels": len(deep), "depth": kept.depth,
        "rebuild_ms": median_ms(lambda: kept.update(C), repeats),
        "sample_kept_ms": median_ms(lambda: draw(kept), repeats),
        "sample_mulsum_ms": median_ms(lambda: draw(other), repeats),
        "level_gather_ms": median_ms(lambda: F.embedding(node, S), repeats) if B * m * S.shape[1] * 4 <= 256 << 20 else None,
        "level_kept_ms": median_ms(lambda: kept._left_mass(ph, node, kept.depth - 1), repeats),
        "level_mulsum_ms": median_ms(lambda: other._left_mass(ph, node, kept.depth - 1), repeats),
        "draws_changed": float((i_kept != i_other).double().mean()),
        "max_log_q_change": float((q_kept - q_other).abs().max()),
        "masses_equal_bitwise": bool(torch.equal(kept._left_mass(ph, node, kept.depth - 1),
                                                 other._left_mass(ph, node, kept.depth - 1))),
    }
    return row


def markdown(rows: list[dict], threads: int) -> str:
    cols = ["setting", "B x m", "D", "gathered levels / depth", "tree rebuild (ms)", "draw, kept (ms)",
            "draw, mul + sum (ms)", "deepest level: kept / mul + sum (ms)", "its gather alone (ms)", "draws changed",
            "log q max change", "masses bit-equal"]
    lines = [f"# RFF tree descent: the deep levels' product as kept (bmm) and as mul + sum ({threads} thread, median)", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        gather = "-" if r["level_gather_ms"] is None else f"{r['level_gather_ms']:.1f}"
        cells = [r["setting"], f"{r['B']} x {r['m']}", str(r["D"]), f"{r['deep_levels']} / {r['depth']}",
                 f"{r['rebuild_ms']:.1f}", f"{r['sample_kept_ms']:.1f}", f"{r['sample_mulsum_ms']:.1f}",
                 f"{r['level_kept_ms']:.1f} / {r['level_mulsum_ms']:.1f}", gather, f"{100 * r['draws_changed']:.3f}%",
                 f"{r['max_log_q_change']:.1e}", "yes" if r["masses_equal_bitwise"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Random class embeddings and queries of the setting's shape; one draw of m per query with the same "
              "generator seed for both forms; the gather alone is timed where its (B, m, 2D) copy fits 256 MB. Other "
              "processes may have shared the machine (see the README)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = [measure(*s, repeats=args.repeats) for s in SETTINGS]
    write_json(OUT / "tree_dot.json", rows)
    write_text(OUT / "tree_dot.md", markdown(rows, args.threads))
    print(markdown(rows, args.threads))


if __name__ == "__main__":
    main()
