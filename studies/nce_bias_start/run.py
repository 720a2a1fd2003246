"""NCE on a language model: does the noise distribution or the bias's start decide its perplexity? Train the xcbench
lm experiment's NCE head (k = 100, its scale's settings, seed 0) with each noise (uniform, unigram) and each bias start
(b = 0, b = log q), at each learning rate of the lm_lr grid, and measure on PTB's validation split what
studies/selective_lm_mass measures for the selective heads (its `measure`, from a zero state):

    ppl                     the full softmax over the vocabulary, as the task evaluates NCE's scores
    mass(R) / freq(R)       the predicted mass on the rarest `--rare` share of the vocabulary over how often they
                            come next (1 = calibrated; above 1: rare words priced too high)
    sel(R), sel(other)      the share of steps in which a word of R (other words) was drawn as noise at least once

NCE's optimum is s_c(h) = log p(c | h): a word is pushed down only when drawn as noise, so under unigram noise a rare
word keeps the score it starts with.

    python studies/nce_bias_start/run.py [--scale quick] [--out studies/nce_bias_start/out]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import tempfile
from pathlib import Path

import torch

from xcbench.catalogue import dataset_entry, load_datasets
from xcbench.config import load_experiment, resolve_experiment
from xcbench.heads import nce as nce_module
from xcbench.io import write_json, write_text
from xcbench.run import make_run
from xcbench.tasks.base import task_of
from xcbench.train import fit, model_of

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
_spec = importlib.util.spec_from_file_location("mass", REPO / "studies" / "selective_lm_mass" / "mass.py")
mass = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mass)


def train_counting_noise(exp: dict, processed: Path) -> tuple:
    """(model, task, counts (C,), steps): the NCE run trained in a temporary folder, the classes each step draws as
    noise counted once per step."""
    run = make_run(exp, "ptb", "nce", 0)
    task = task_of(run, dataset_entry("ptb", load_datasets()), str(processed), None, CPU)
    model = model_of(run, task)
    counts, steps, draw = torch.zeros(task.n_classes), [0], nce_module.multinomial

    def counting(p, k, gen):
        n = draw(p, k, gen)                                                                    # (k,)
        counts[torch.unique(n)] += 1
        steps[0] += 1
        return n
    nce_module.multinomial = counting
    try:
        with tempfile.TemporaryDirectory() as d:
            fit(model, task, run.train, Path(d), 0, CPU, spec=None)
    finally:
        nce_module.multinomial = draw
    return model, task, counts, steps[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="quick")
    p.add_argument("--rare", type=float, default=0.9, help="share of the vocabulary, rarest first, in R")
    p.add_argument("--processed", type=Path, default=REPO / "data" / "processed" / "ptb" / "dataset.npz")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    torch.set_num_threads(1)
    experiments = REPO / "config" / "experiments" / "xcbench"
    exp = resolve_experiment(load_experiment(experiments / "lm.yaml"), a.scale)
    grid = sorted(m["train"]["lr"] for k, m in resolve_experiment(load_experiment(experiments / "lm_lr.yaml"),
                                                                  a.scale)["methods"].items() if k.startswith("nce.lr"))
    rows = []
    for noise in ("uniform", "unigram"):
        for bias_init in ("zero", "log_noise"):
            for lr in grid:
                e = copy.deepcopy(exp)
                e["methods"]["nce"]["params"].update(noise=noise, bias_init=bias_init)
                e["methods"]["nce"].setdefault("train", {})["lr"] = lr
                model, task, counts, steps = train_counting_noise(e, a.processed)
                train_count = torch.bincount(task.tokens["train"].long(), minlength=task.n_classes)  # (C,)
                rare = train_count.argsort()[: int(a.rare * task.n_classes)]                           # rarest first
                rows.append({"noise": noise, "bias_init": bias_init, "lr": lr, "steps": steps,
                             **mass.measure(model, task, rare, counts, steps)})
                print(rows[-1], flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / f"nce_{a.scale}.json", {"scale": a.scale, "rare_share": a.rare, "runs": rows})
    best = {(r["noise"], r["bias_init"]): min((x for x in rows if (x["noise"], x["bias_init"]) ==
                                               (r["noise"], r["bias_init"])), key=lambda x: x["ppl"]) for r in rows}
    lines = [f"# NCE on PTB ({a.scale} scale, seed 0): noise and bias start, validation split after the last epoch; "
             f"R = the rarest {a.rare:.0%} of the vocabulary; * = the variant's best lr", "",
             "| noise | bias start | lr | val acc | val ppl | mass(R) | freq(R) | mass / freq | sel(R) | sel(other) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        star = " *" if best[(r["noise"], r["bias_init"])] is r else ""
        lines.append(f"| {r['noise']} | {r['bias_init']} | {r['lr']:g}{star} | {r['acc']:.4f} | {r['ppl']:,.1f} | "
                     f"{r['mass_rare']:.3f} | {r['freq_rare']:.3f} | {r['mass_over_freq']:.2f} | "
                     f"{r['sel_rare']:.4f} | {r['sel_other']:.4f} |")
    write_text(a.out / f"nce_{a.scale}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
