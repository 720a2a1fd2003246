"""Layer-level benchmark of Schultheis & Babbar (2023): dense e -> m versus [e -> I dense + sparse
I -> m] (uniform fixed fan-in, or unstructured COO with the same non-zeros), batch 32, e = 512.

For every configuration one fresh subprocess times forward + backward (squared hinge over all
labels) + Adam step (median of --steps after one warm-up) and reports the memory: measured (GPU:
torch.cuda.max_memory_allocated; CPU: peak RSS growth of the process) and analytic (bytes of
parameters + gradients + Adam state + indices). Ratios are taken within one run of this script.
Writes benchmarks/out/sparse_layer.{json,md}.

    python benchmarks/sparse_layer.py                 # the paper's sizes (m up to 670K; ~10 min on 2 cores)
    python benchmarks/sparse_layer.py --labels 31000  # one label-space size
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import write_outputs

OUT = Path(__file__).resolve().parent / "out"


def one(cfg: dict) -> dict:
    import torch

    from xcbench.model import build_model
    from xcbench.step import memory_report

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    g = torch.Generator().manual_seed(0)
    enc = {"name": "identity"} if cfg["I"] == 0 else {"name": "mlp", "hidden": cfg["I"]}
    params = {} if cfg["head"] == "sq_hinge" else {"fan_in": cfg["s"], "rewire_interval": 0}
    model = build_model({"encoder": enc}, cfg["head"], params, cfg["e"], cfg["m"], 0).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(cfg["B"], cfg["e"], generator=g).to(dev)
    y = torch.randint(0, cfg["m"], (cfg["B"], 5), generator=g).to(dev)
    times = []
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(cfg["steps"] + 1):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        loss = model.loss(x, y, None, None)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t)
    mem = memory_report(model, opt, dev)
    measured = torch.cuda.max_memory_allocated() if dev.type == "cuda" else \
        (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss) * 1024
    return {**cfg, "device": str(dev), "step_s": statistics.median(times), "measured_bytes": int(measured),
            "analytic_bytes": mem["analytic_bytes"], "torch": torch.__version__}


def configs(labels: list[int], inter: list[int], fan_in: list[int], B: int, e: int, steps: int) -> list[dict]:
    out = []
    for m in labels:
        out.append({"name": "dense", "head": "sq_hinge", "m": m, "I": 0, "s": 0})
        for I in inter:
            for s in fan_in:
                for kind, head in (("uniform", "uniform_sparse"), ("unstructured", "unstructured_sparse")):
                    out.append({"name": f"{kind}-{s}+{I}", "head": head, "m": m, "I": I, "s": s})
            if 16 * I * m <= 8 * 2**30:  # dense I -> m with Adam needs 16 bytes a weight: keep what fits in 8 GiB
                out.append({"name": f"dense+{I}", "head": "sq_hinge", "m": m, "I": I, "s": 0})
    return [{**c, "B": B, "e": e, "steps": steps} for c in out]


def table(rows: list[dict]) -> str:
    lines = ["| m | setup | step (s) | vs dense | measured mem (MiB) | analytic mem (MiB) | mem vs dense |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        d = next(x for x in rows if x["m"] == r["m"] and x["name"] == "dense")
        lines.append(f"| {r['m']:,} | {r['name']} | {r['step_s']:.3f} | {r['step_s'] / d['step_s']:.2f}x | "
                     f"{r['measured_bytes'] / 2**20:.0f} | {r['analytic_bytes'] / 2**20:.0f} | "
                     f"{r['analytic_bytes'] / d['analytic_bytes']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", type=int, nargs="*", default=[31000, 131000, 670000])
    p.add_argument("--intermediate", type=int, nargs="*", default=[16384, 32768])
    p.add_argument("--fan-in", type=int, nargs="*", default=[32, 64])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--features", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(json.loads(a.one))))
        return
    rows = []
    from tqdm import tqdm

    for cfg in tqdm(configs(a.labels, a.intermediate, a.fan_in, a.batch, a.features, a.steps), desc="configs"):
        r = subprocess.run([sys.executable, __file__, "--one", json.dumps(cfg)], capture_output=True, text=True)
        if r.returncode:
            rows.append({**cfg, "error": r.stderr[-500:] or f"exit code {r.returncode} (killed: out of memory?)"})
            print(f"{cfg['name']} m={cfg['m']}: failed: {r.stderr[-300:]}", file=sys.stderr)
            continue
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    OUT.mkdir(exist_ok=True)
    ok = [r for r in rows if "error" not in r]
    write_outputs("sparse_layer", rows, f"# Sparse last layer, batch {a.batch}, e = {a.features} "
                  f"(device: {ok[0]['device'] if ok else '?'})\n\n" + table(ok))
    print(table(ok))


if __name__ == "__main__":
    main()
