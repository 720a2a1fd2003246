"""The hashing forest's bfloat16 first pass (`prefilter`) and wide best-first rounds (`probe_width`,
selectors/forest.py) at n = 10^6: precision, selection and one selective-softmax training step, with and
without them, beside the full softmax step, in one run.

selector_bench.py measures every selector once, in sequence; its step timings at 10^6 moved by 25% between
two runs on this machine. Here one head holds one forest (10 trees, leaf 64, response re-rank) and the
settings take turns: each round times, for every (probe, prefilter, probe_width) setting, the batch's selection
(`select`) and one step (loss, backward, lazy Adam) `--repeats` times, and the full softmax step; the
table gives the medians over all rounds. Data: selector_bench's cluster mixture and queries (B = 256,
d = 256, M = 1%). Precision: the share of each query's exact top-q negatives (q = M / B) in its own
selection (selector_bench's measure).

    python studies/hf_prefilter/hf_prefilter.py            # about 6 minutes on 2 cores
Writes studies/hf_prefilter/out/hf_prefilter.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # selector_bench's data and measure
from selector_bench import per_example_mask  # noqa: E402
from selector_common import mixture_problem  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
SETTINGS = ((15, 0, 1), (15, 4, 1), (23, 0, 1), (23, 4, 1), (15, 4, 5), (16, 4, 8), (20, 4, 10))  # (probe, prefilter k, probe_width)


def main() -> None:
    from xcbench.heads.full_softmax import FullSoftmax
    from xcbench.heads.selective_softmax import SelectiveSoftmax
    from xcbench.optim.lazy_adam import LazyAdam

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10 ** 6)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    n, d, B = a.n, 256, 256
    W, h, y = mixture_problem(n, d, B)
    params = {"trees": 10, "leaf": 64, "rebuild_every": None, "rerank": "inner", "probe": 15}
    heads = {"hf": SelectiveSoftmax(d, n, torch.Generator().manual_seed(1), selector="hf", selector_params=params, M=n // 100),
             "full": FullSoftmax(d, n, torch.Generator().manual_seed(1))}
    opts = {}
    for key, head in heads.items():
        with torch.no_grad():
            head.W.copy_(W)
        t0 = time.perf_counter()
        head.on_epoch_start(0, torch.Generator().manual_seed(2))
        print(f"{key}: index built in {time.perf_counter() - t0:.1f} s", flush=True)
        opts[key] = LazyAdam(head.parameters(), lr=1e-3)
    gen, sel = torch.Generator().manual_seed(3), heads["hf"].selector

    def step(key):
        loss = heads[key].loss(h, y, None, gen)
        opts[key].zero_grad(set_to_none=True)
        loss.backward()
        opts[key].step()

    def times(fn) -> list[float]:
        fn()  # warm-up (the first prefiltering query also makes the bfloat16 copy)
        out = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    q = math.ceil(n // 100 / B)
    with torch.no_grad():
        top = (h @ W.T).scatter(1, y.unsqueeze(1), -math.inf).topk(q, dim=1).indices                # (B, q) hardest negatives
    got = {s: {"select": [], "step": []} for s in SETTINGS}
    for s in SETTINGS:
        sel.probe, sel.prefilter, sel.probe_width = s
        got[s]["precision"] = per_example_mask(sel, "hf", h, y, q + 1).gather(1, top).double().mean().item()
    full = []
    for r in range(a.rounds):
        for s in SETTINGS:
            sel.probe, sel.prefilter, sel.probe_width = s
            got[s]["select"] += times(lambda: sel.select(h, y, n // 100, gen))
            got[s]["step"] += times(lambda: step("hf"))
            print(f"round {r} probe {s[0]} prefilter {s[1]} width {s[2]}: select {statistics.median(got[s]['select'][-a.repeats:]):.3f} s, "
                  f"step {statistics.median(got[s]['step'][-a.repeats:]):.3f} s", flush=True)
        full += times(lambda: step("full"))
        print(f"round {r} full softmax step {statistics.median(full[-a.repeats:]):.3f} s", flush=True)
    f = statistics.median(full)
    rows = [{"probe": s[0], "prefilter": s[1], "probe_width": s[2], "precision": v["precision"],
             "select_s": statistics.median(v["select"]), "step_s": statistics.median(v["step"]),
             "select_all": v["select"], "step_all": v["step"]} for s, v in got.items()]
    meta = {"n": n, "d": d, "B": B, "M": n // 100, "threads": torch.get_num_threads(), "machine": platform.machine(),
            "rounds": a.rounds, "repeats": a.repeats, "full_step_s": f, "full_all": full}
    OUT.mkdir(exist_ok=True)
    (OUT / "hf_prefilter.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# HF's bfloat16 first pass and wide rounds at n = {n:,} ({meta['threads']} CPU threads, {meta['machine']}; "
             "studies/hf_prefilter/hf_prefilter.py)", "",
             f"One forest (10 trees, leaf 64, response re-rank), B = {B}, d = {d}, M = {n // 100:,}; settings in turn, "
             f"{a.rounds} rounds of {a.repeats} timings each, medians. Full softmax step: {f:.3f} s.", "",
             "| probe rounds | probe_width | prefilter | precision | selection (s) | step (s) | step speed-up vs full |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['probe']} | {r['probe_width']} | {r['prefilter'] or '- (exact re-rank)'} | {r['precision']:.3f} | "
              f"{r['select_s']:.3f} | {r['step_s']:.3f} | "
              f"{f / r['step_s']:.1f}x |" for r in rows]
    (OUT / "hf_prefilter.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
