"""Global-norm gradient clipping on the CPU, g <- g min(1, c / ||g||_2) with ||g||_2^2 = sum over every gradient
of its float64 sum of squares (optim/weights.clip_grad_norm), in three forms on the real gradients of one run:

  two buffers  g.double().square().sum(): a float64 copy, then a second fresh buffer for the squares (the form
               every kept run up to 2026-12-01 was trained with)
  in place     the float64 copy squared in place, then summed: the registered clip; the same squares in the
               same tensor, so the same sums and the same norm bit for bit
  torch        torch.nn.utils.clip_grad_norm_ (foreach, float32 norms): for reference; it rounds differently

It times the clip alone on one step's gradients, then whole training steps (loss, backward, clip, optimizer)
with each form in turn on the same batches; `identical`: the weights after the timed steps equal the
registered form's bit for bit. PTB's LSTM language models clip at 0.25 every step, and their two (10^4, 200)
tables make the float64 passes large beside the model's arithmetic (a 2-layer LSTM of width 200):

    python benchmarks/grad_clip.py --experiment config/experiments/midx/fig7a.yaml --scale paper --dataset ptb \\
        --processed data/processed/ptb/dataset.npz --methods uniform_m5 rq_m50 --threads 1

Writes benchmarks/out/grad_clip.{json,md}.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import time

import torch
from built import build, same_weights, steps_in_turn
from common import OUT, write_outputs


@torch.no_grad()
def clip_two_buffers(params, max_norm: float) -> torch.Tensor:
    """The clip as it was before 2026-12-01 (dense gradients only): a second float64 buffer for the squares."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.sqrt(sum((g.double().square().sum() for g in grads), torch.zeros((), dtype=torch.float64)))
    factor = torch.where(norm > max_norm, max_norm / (norm + 1e-6), torch.ones_like(norm))
    for g in grads:
        g.mul_(factor.to(g.dtype))
    return norm


def forms() -> dict:
    from xcbench.optim.weights import clip_grad_norm

    return {"two buffers": clip_two_buffers, "in place": clip_grad_norm,
            "torch": lambda ps, c: torch.nn.utils.clip_grad_norm_(list(ps), c, foreach=True)}


def step_with(clip):
    """step.train_step with `clip` in place of the registered clip (the module's name, swapped for the call)."""
    import xcbench.step as step_mod

    def step(*args):
        real, step_mod.clip_grad_norm = step_mod.clip_grad_norm, clip
        try:
            return step_mod.train_step(*args)
        finally:
            step_mod.clip_grad_norm = real
    return step


def measure(a) -> list[dict]:
    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.seed import torch_generator
    from xcbench.tasks.base import make_task

    exp = resolve_experiment(load_experiment(a.experiment), a.scale, check_libraries=False)
    device = torch.device("cpu")
    task = make_task(exp, dataset_entry(a.dataset, load_datasets()), a.processed, a.features, device, 0, dataset=a.dataset)
    out = []
    for method in a.methods or list(exp["methods"]):
        runs = {}
        for f, clip in forms().items():
            _, cfg, model, opt = build(exp, task, a.dataset, method, device)
            model.head.on_epoch_start(0, torch_generator(0, "index"))
            runs[f] = (model, opt, torch_generator(0, "loss"), cfg, step_with(clip))
        c = float(cfg.get("grad_clip") or 0.25)
        bs = int(cfg["batch_size"])
        batches = list(itertools.islice(task.train_batches(bs, torch_generator(0, "batches")), a.rounds + 2))
        case = f"{exp['paper']}/{exp['artifact']} {a.dataset} {method}"
        model = runs["in place"][0]  # the clip alone, on the gradients of one more backward
        model.loss(*batches[0], torch_generator(0, "loss")).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        alone = {f: [] for f in runs}
        for _ in range(a.rounds + 2):
            for f, clip in forms().items():
                for p, g in zip(model.parameters(), grads):
                    p.grad = g.clone()
                t0 = time.perf_counter()
                clip(model.parameters(), c)
                alone[f].append(time.perf_counter() - t0)
        mb = sum(g.numel() for g in grads) * 4 / 2 ** 20
        ref = statistics.median(alone["two buffers"][2:])
        out += [{"part": "clip alone", "case": f"{case} ({mb:.0f} MiB of gradients)", "form": f,
                 "ms": 1e3 * statistics.median(ts[2:]), "x two buffers": statistics.median(ts[2:]) / ref,
                 "identical": None} for f, ts in alone.items()]
        for p in model.parameters():
            p.grad = None
        times = steps_in_turn(runs, batches)
        ref = statistics.median(times["two buffers"])
        out += [{"part": "train step", "case": case, "form": f, "ms": 1e3 * statistics.median(ts),
                 "x two buffers": statistics.median(ts) / ref,
                 "identical": same_weights(runs[f][0], runs["in place"][0])} for f, ts in times.items()]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", required=True), p.add_argument("--scale", default="paper")
    p.add_argument("--dataset", required=True), p.add_argument("--processed", required=True)
    p.add_argument("--features"), p.add_argument("--methods", nargs="*")
    p.add_argument("--rounds", type=int, default=20), p.add_argument("--threads", type=int, default=1)
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("--out-dir", default=OUT)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rows = measure(a)
    where = f"{platform.processor() or platform.machine()}, {a.threads} thread(s), {os.cpu_count()} cores"
    md = [f"# Gradient clipping on the CPU: two float64 buffers, one squared in place (registered), torch's ({where})",
          "", "| part | case | form | ms | x two buffers | identical to in place |", "|---|---|---|---|---|---|"]
    md += [f"| {r['part']} | {r['case']} | {r['form']} | {r['ms']:.1f} | {r['x two buffers']:.2f} | "
           f"{'-' if r['identical'] is None else r['identical']} |" for r in rows]
    md += ["", f"Median of {a.rounds} rounds after two warm-up rounds; in each round every form runs in turn (the same "
           "load for all). identical: every weight after the timed steps equals the registered form's, bit for bit "
           "(`two buffers` must be: the kept runs were trained with it; torch's float32 norms round differently). "
           + a.note]
    for path in write_outputs("grad_clip", {"where": where, "note": a.note, "rows": rows}, "\n".join(md), a.out_dir):
        print("wrote", path)


if __name__ == "__main__":
    main()
