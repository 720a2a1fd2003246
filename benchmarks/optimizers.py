"""Adam's update on the CPU: torch's per-tensor loop (its CPU default), its multi-tensor form (`foreach`,
what the registered `adam` uses) and its fused kernel, on a class table (n, d) with an encoder layer beside
it; then, given a prepared dataset, whole training steps of an experiment's methods with each form.

Adam makes several passes over the parameters and both moments per step (m <- b1 m + (1 - b1) g,
v <- b2 v + (1 - b2) g^2, p <- p - lr m_hat / (sqrt(v_hat) + eps)); for a sampled head under dense Adam
these O(n d) passes are most of the CPU step. Each form's time is the median over rounds that run the forms
in turn (one load for all); `identical`: the parameters after the timed steps equal the loop's bit for bit.

    python benchmarks/optimizers.py [--experiment config/experiments/xcbench/xmc.yaml --scale quick \\
        --dataset synthetic-xmc-10k --processed ... --features ... --methods full uniform midx_rq]

Writes benchmarks/out/optimizers.{json,md}.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import time

import torch
from built import build, experiment_task, same_weights, steps_in_turn
from common import OUT, write_outputs

FORMS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True, "foreach": False}}


def adam_alone(n: int, d: int, rounds: int) -> list[dict]:
    """ms of one Adam step per form on [(n, d), (d, d), (d,), (n,)] with fresh gradients each round."""
    g = torch.Generator().manual_seed(0)
    init = [torch.randn(*s, generator=g) for s in ((n, d), (d, d), (d,), (n,))]
    params = {f: [torch.nn.Parameter(t.clone()) for t in init] for f in FORMS}
    opts = {f: torch.optim.Adam(params[f], lr=1e-3, **kw) for f, kw in FORMS.items()}
    times = {f: [] for f in FORMS}
    for r in range(rounds + 2):
        grads = [torch.randn(t.shape, generator=g) for t in init]
        for f in FORMS:
            for p, gr in zip(params[f], grads):
                p.grad = gr.clone()
            t0 = time.perf_counter()
            opts[f].step()
            if r >= 2:  # two warm-up rounds
                times[f].append(time.perf_counter() - t0)
    loop = statistics.median(times["loop"])
    return [{"part": "adam step", "case": f"n = {n:,}, d = {d}", "form": f, "ms": 1e3 * statistics.median(ts),
             "x loop": statistics.median(ts) / loop,
             "identical": all(torch.equal(a, b) for a, b in zip(params[f], params["loop"]))} for f, ts in times.items()]


def train_steps(a, rounds: int) -> list[dict]:
    """ms of whole training steps (loss, backward, Adam) per form for each method, on the same batches."""
    from xcbench.seed import torch_generator
    from xcbench.step import train_step

    device = torch.device("cpu")
    exp, task = experiment_task(a.experiment, a.scale, a.dataset, a.processed, a.features, device)
    out = []
    for method in a.methods or list(exp["methods"]):
        runs = {}
        for f, kw in FORMS.items():
            e = {**exp, "train": {**exp["train"], "optimizer_params": kw}}
            _, cfg, model, opt = build(e, task, a.dataset, method, device)
            if cfg.get("optimizer", "adam") != "adam":
                break
            model.head.on_epoch_start(0, torch_generator(0, "index"))
            runs[f] = (model, opt, torch_generator(0, "loss"), cfg, train_step)
        if not runs:
            continue
        bs = int(runs["loop"][3]["batch_size"])
        batches = list(itertools.islice(task.train_batches(bs, torch_generator(0, "batches")), rounds + 2))
        times = steps_in_turn(runs, batches)
        loop = statistics.median(times["loop"])
        out += [{"part": "train step", "case": f"{exp['paper']}/{exp['artifact']} {a.dataset} {method}", "form": f,
                 "ms": 1e3 * statistics.median(ts), "x loop": statistics.median(ts) / loop,
                 "identical": same_weights(runs[f][0], runs["loop"][0])} for f, ts in times.items()]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000], help="class-table rows n")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--experiment"), p.add_argument("--scale", default="quick"), p.add_argument("--dataset")
    p.add_argument("--processed"), p.add_argument("--features"), p.add_argument("--methods", nargs="*")
    p.add_argument("--out-dir", default=OUT)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rows = [r for n in a.sizes for r in adam_alone(n, a.dim, a.rounds)]
    if a.experiment:
        rows += train_steps(a, a.rounds)
    where = f"{platform.processor() or platform.machine()}, {a.threads} thread(s), {os.cpu_count()} cores"
    md = [f"# Adam on the CPU: per-tensor loop, multi-tensor (foreach, the registered `adam`) and fused ({where})", "",
          "| part | case | form | ms | x loop | identical to loop |", "|---|---|---|---|---|---|"]
    md += [f"| {r['part']} | {r['case']} | {r['form']} | {r['ms']:.1f} | {r['x loop']:.2f} | {r['identical']} |" for r in rows]
    md += ["", f"Median of {a.rounds} rounds after two warm-up rounds; in each round every form takes one step in turn "
           "(the same load for all). identical: every parameter after the rounds equals the per-tensor loop's, bit for "
           "bit. The fused kernel is not identical (it rounds differently), so it is not the default: switching to it "
           "would change every kept run's numbers."]
    for path in write_outputs("optimizers", {"where": where, "rows": rows}, "\n".join(md), a.out_dir):
        print("wrote", path)


if __name__ == "__main__":
    main()
