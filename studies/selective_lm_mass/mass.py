"""Where does a selective softmax put the full softmax's mass? Train the xcbench lm experiment's Random and HF
selective heads (the same settings, seed 0), count how often each word enters an active set (the training steps', and
the per-epoch probe's one selection: 2 of the paper setting's 2,658 counted over two epochs), and evaluate
on PTB's validation split from a zero state:

    acc, ppl                     the full softmax over the vocabulary, as the task evaluates it
    mass(R) = mean_t sum_{c in R} softmax(o_t)_c     the predicted mass on a set R of words
    freq(R) = mean_t [y_t in R]                      how often the next word is in R
    sel(R)  = mean_{c in R} (steps with c in S) / steps     how often R's words were trained as negatives or labels

for R = the rarest words of the training text (bottom `--rare` share of the vocabulary by training count). A
calibrated model has mass(R) close to freq(R); mass(R) / freq(R) above 1 prices those words too high, which costs
perplexity on every token whose next word is not in R, while the top-1 choice can be unaffected.

    python studies/selective_lm_mass/mass.py [--scale quick] [--epochs N] [--lr X] [--out studies/selective_lm_mass/out]
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import torch

from xcbench.catalogue import dataset_entry, load_datasets
from xcbench.config import load_experiment, resolve_experiment
from xcbench.io import write_json, write_text
from xcbench.run import make_run
from xcbench.tasks.base import task_of
from xcbench.train import fit, model_of

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


def train_counting(exp: dict, method: str, processed: Path, train_over: dict) -> tuple:
    """(model, task, counts (C,), steps): the run trained in a temporary folder, each active set counted."""
    run = make_run(exp, "ptb", method, 0)
    task = task_of(run, dataset_entry("ptb", load_datasets()), str(processed), None, CPU)
    model = model_of(run, task)
    counts, steps, real = torch.zeros(task.n_classes), [0], model.head.active_set

    def counting(h, y, gen):
        S = real(h, y, gen)                                                                    # (M',)
        counts[S] += 1
        steps[0] += 1
        return S
    model.head.active_set = counting
    with tempfile.TemporaryDirectory() as d:
        fit(model, task, {**run.train, **train_over}, Path(d), 0, CPU, spec=None)
    return model, task, counts, steps[0]


@torch.no_grad()
def measure(model, task, rare: torch.Tensor, counts: torch.Tensor, steps: int, chunk: int = 64) -> dict:
    """acc, ppl, mass(R), freq(R), sel(R) and sel over the other words (module docstring); `chunk` windows at a
    time (PTB's validation split at the paper's vocabulary is 73K x 10K logits: 5.9 GB in float64 at once)."""
    model.eval()
    tok, T = task.tokens["val"].long(), task.T
    W = (len(tok) - 1) // T
    x_all, y_all = tok[: W * T].view(W, T), tok[1: W * T + 1].view(W, T)                        # (W, T)
    in_r = torch.zeros(task.n_classes, dtype=torch.bool)
    in_r[rare] = True
    n = hit = nll = mass = 0.0
    for s in range(0, W, chunk):
        o, _ = model.scores_with_state(x_all[s:s + chunk], None)                               # (c T, C)
        y = y_all[s:s + chunk].reshape(-1)
        logp = torch.log_softmax(o.double(), 1)
        n, hit = n + len(y), hit + (o.argmax(1) == y).sum().item()
        nll -= logp.gather(1, y[:, None]).sum().item()
        mass += logp[:, in_r].exp().sum().item()
    freq = in_r[y_all.reshape(-1)].double().mean().item()
    return {"acc": hit / n, "ppl": math.exp(nll / n), "mass_rare": mass / n, "freq_rare": freq,
            "mass_over_freq": mass / n / freq, "sel_rare": (counts[in_r] / steps).mean().item(),
            "sel_other": (counts[~in_r] / steps).mean().item(), "never_selected": int((counts == 0).sum())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="quick")
    p.add_argument("--epochs", type=int, default=None, help="override the scale's epochs")
    p.add_argument("--lr", type=float, default=None, help="one learning rate for both heads (default: each its own)")
    p.add_argument("--rare", type=float, default=0.9, help="share of the vocabulary, rarest first, in R")
    p.add_argument("--processed", type=Path, default=REPO / "data" / "processed" / "ptb" / "dataset.npz")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    torch.set_num_threads(1)
    exp = resolve_experiment(load_experiment(REPO / "config" / "experiments" / "xcbench" / "lm.yaml"), a.scale)
    over = {k: v for k, v in (("epochs", a.epochs), ("lr", a.lr)) if v is not None}
    rows = {}
    for method in ("random", "hf"):
        model, task, counts, steps = train_counting(exp, method, a.processed, over)
        train_count = torch.bincount(task.tokens["train"].long(), minlength=task.n_classes)     # (C,)
        rare = train_count.argsort()[: int(a.rare * task.n_classes)]                              # rarest first
        rows[method] = {"steps": steps, **measure(model, task, rare, counts, steps)}
        print(method, rows[method], flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    name = f"mass_{a.scale}" + "".join(f"_{k}{v}" for k, v in over.items())
    write_json(a.out / f"{name}.json", {"scale": a.scale, "overrides": over, "rare_share": a.rare, "runs": rows})
    lines = [f"# Selective softmax on PTB ({a.scale} scale{', ' + str(over) if over else ''}): the mass on the rarest "
             f"{a.rare:.0%} of the vocabulary", "",
             "| head | val acc | val ppl | mass(R) | freq(R) | mass / freq | sel(R) | sel(other) | never selected |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m, r in rows.items():
        lines.append(f"| {m} | {r['acc']:.4f} | {r['ppl']:.1f} | {r['mass_rare']:.4f} | {r['freq_rare']:.4f} | "
                     f"{r['mass_over_freq']:.2f} | {r['sel_rare']:.4f} | {r['sel_other']:.4f} | {r['never_selected']:,} |")
    write_text(a.out / f"{name}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
