"""Why does MIDX's proposal drift away from the softmax in the xcbench lm table? From a run's epoch checkpoints,
split the KL that history.csv logs into the part a fresh index would remove and the part it would not.

MIDX rebuilds its index (k-means codebooks U, V and each class's cell) once, at an epoch's start, from the class
embeddings E then; the run's `kl_proposal` is measured at the epoch's end, after the epoch's steps moved E:

    KL_stale(e) = mean_h KL(softmax(h E_e^T) || q(. | h; index of E_{e-1}))    what history.csv logs for epoch e
    KL_fresh(e) = mean_h KL(softmax(h E_e^T) || q(. | h; index of E_e))        what epoch e + 1 starts with

over the task's probe batch (the first training windows, as the run measures). The stale index is rebuilt
exactly as the run built it (checkpoint e - 1's weights, codewords and index generator), and its codewords are
checked against those checkpoint e stores. Beside the two KLs:

    res(E, index) = sum_i ||c_i - u_{a_i} - v_{b_i}||^2 / sum_i ||c_i||^2    the quantization's share of E
    move(e)       = ||E_e - E_{e-1}||_F / ||E_e||_F                           how far an epoch moves the classes
    |c|, |h|      mean class-embedding and probe-query norms (the logits' scale)
    mass_rare     the model's softmax mass on the rarest 90% of the vocabulary (training counts), mean over the
                  probe, beside freq_rare, how often the probe's next word is one of them; val_*: the same over the
                  validation split every --val-every epochs and at the last (studies/selective_lm_mass)

For a head without a MIDX sampler (Full, Unigram: the controls), the same index (`--index`, K codewords) is built on
its class embeddings and generator as a MIDX head would, and kl_logged is its own proposal's (Unigram) or empty.

KL_fresh << KL_stale says the drift is the index's age (a rebuild more often would remove it); KL_fresh rising
with KL_stale says the embeddings became harder to quantize with K codewords (norms, residual share).

    python studies/midx_kl_drift/drift.py --method midx_rq --scale quick --train 6     # trains, ~1 min
    python studies/midx_kl_drift/drift.py --method midx_pq --scale paper --checkpoints DIR
        # DIR: copies of results/paper/xcbench/lm/ptb/midx_pq/seed0/checkpoint.pt after each epoch
    python studies/midx_kl_drift/drift.py --method midx_pq --scale paper --train 40 --plateau
        # trains the run under MIDX Table 4's decaying lr rule instead (1.35 h on one thread), then measures it
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import shutil
from pathlib import Path

import torch

from xcbench.catalogue import dataset_entry, load_datasets
from xcbench.checkpoint import StopAfter
from xcbench.config import load_experiment, resolve_experiment
from xcbench.io import read_json, write_json, write_text
from xcbench.registry import SAMPLERS
from xcbench.run import make_run
from xcbench.samplers.base import proposal_kl
from xcbench.step import setup_head
from xcbench.tasks.base import task_of
from xcbench.train import FitOptions, _probe_h, fit, model_of

REPO = Path(__file__).resolve().parents[2]
PLATEAU = {"metric": "ppl", "mode": "min", "factor": 0.25, "patience": 2, "min_delta": 0.1, "min_lr": 1e-6,
           "stop_patience": 10}
CPU = torch.device("cpu")
_spec = importlib.util.spec_from_file_location("mass", REPO / "studies" / "selective_lm_mass" / "mass.py")
mass = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mass)


def train_epochs(run, task, epochs: int, work: Path) -> tuple[Path, dict]:
    """Train `run` epoch by epoch (fit resumes from its checkpoint: the same run as uninterrupted), copying the
    checkpoint after each epoch to work/ckpt/epochNNN.pt, until its epochs are done or its schedule stops it;
    returns the folder and the run's test metrics at its selected epoch."""
    (work / "ckpt").mkdir(parents=True, exist_ok=True)
    for e in range(1, epochs + 1):
        try:
            res = fit(model_of(run, task), task, run.train, work / "run", run.seed, CPU, FitOptions(stop_after=e),
                      spec=run.spec)
        except StopAfter:
            res = None
        shutil.copy(work / "run" / "checkpoint.pt", work / "ckpt" / f"epoch{e:03d}.pt")
        if res is not None:  # trained to the end, or stopped by the schedule (`plateau`)
            return work / "ckpt", {"test": res["test"], "best_epoch": res["best_epoch"],
                                   "epochs_trained": res["history"][-1]["epoch"]}
    return work / "ckpt", {}


def by_epoch(folder: Path) -> dict[int, dict]:
    """The checkpoints in `folder`, by the epoch each holds (the file names do not matter); memory-mapped, so a
    run's 40 checkpoints are not all read into memory and an epoch whose row is reused is never read."""
    out = {}
    for f in sorted(folder.glob("*.pt")):
        ck = torch.load(f, weights_only=True, map_location="cpu", mmap=True)
        out[int(ck["epoch"])] = ck
    return out


def classes(model) -> torch.Tensor:
    """The class embeddings the index quantizes (n, d): what the head scores h against."""
    head = model.head
    return head._unit(head.E.detach()) if hasattr(head, "sampler") else head.class_embeddings().detach()


def index_of(model, sampler, ck: dict) -> None:
    """Build the index as the epoch after checkpoint `ck` began: its weights and codewords, its generator (`sampler`
    the head's own; for a head without one, a MIDX sampler built the same way on its class embeddings)."""
    model.load_state_dict(ck["model"])
    g = torch.Generator()
    g.set_state(ck["index_gen"])
    if sampler is getattr(model.head, "sampler", None):
        model.head.on_epoch_start(0, g)
    else:
        sampler.update(classes(model), g)


def kl(sampler, h: torch.Tensor, C: torch.Tensor) -> float:
    """mean over h of KL(softmax(h C^T) || q(. | h)), exact over all n classes (float64)."""
    return proposal_kl(sampler, h, lambda hb: hb @ C.T)[0].mean().item()


def residual_share(sampler, C: torch.Tensor, stale: bool) -> float:
    """res(C, index): the index's own cells (stale: assigned from the earlier C) or C's nearest codewords."""
    a, b = (sampler.a, sampler.b) if stale else sampler.assign(C, sampler.U, sampler.V)
    r = C - sampler.quantized(a, b)                                                           # (n, d)
    return (r.square().sum() / C.square().sum()).item()


@torch.no_grad()
def measure(model, sampler, task, rare: torch.Tensor, prev: dict, ck: dict, on_val: bool) -> dict:
    """Checkpoint `ck`'s epoch e: the stale and the fresh index's KL and the quantities beside them."""
    index_of(model, sampler, prev)                                                            # the index epoch e used
    U_built, C_prev = sampler.U.clone(), classes(model).clone()
    model.load_state_dict(ck["model"])                                                        # C_e, codewords as stored
    model.eval()
    C = classes(model)                                                                        # (n, d)
    h, y = _probe_h(model, task)                                                              # (P, d), (P,)
    p = torch.softmax(model.head.scores(h).double(), 1)                                       # (P, n) the model's own
    h = model.head._unit(h) if hasattr(model.head, "_unit") else h
    own = sampler is getattr(model.head, "sampler", None)
    row = {"epoch": int(ck["epoch"]), "lr": ck["history"][-1]["lr"], "val_ppl": ck["history"][-1].get("val_ppl", math.nan),
           "kl_logged": ck["history"][-1].get("kl_proposal", math.nan),
           "codewords_rebuilt_diff": (U_built - sampler.U).abs().max().item() if own else math.nan,
           "mass_rare": p[:, rare].sum(1).mean().item(), "freq_rare": torch.isin(y, rare).double().mean().item(),
           "kl_stale": kl(sampler, h, C), "res_stale": residual_share(sampler, C, stale=True)}
    index_of(model, sampler, ck)                                                              # rebuilt from C_e
    row.update(kl_fresh=kl(sampler, h, C), res_fresh=residual_share(sampler, C, stale=False),
               move=((C - C_prev).norm() / C.norm()).item(), c_norm=C.norm(dim=1).mean().item(),
               h_norm=h.norm(dim=1).mean().item())
    if on_val:  # the same on PTB's validation split (studies/selective_lm_mass): the perplexity's own tokens
        val = mass.measure(model, task, rare, torch.zeros(task.n_classes), 1)
        row.update(val_mass_rare=val["mass_rare"], val_freq_rare=val["freq_rare"])
    return row


def spearman(x: list[float], y: list[float]) -> float:
    rx, ry = (torch.tensor(v).argsort().argsort().double() for v in (x, y))
    return torch.corrcoef(torch.stack([rx, ry]))[0, 1].item()


COLUMNS = [("epoch", "{:d}"), ("lr", "{:.1e}"), ("val_ppl", "{:.1f}"), ("kl_logged", "{:.3f}"), ("kl_stale", "{:.3f}"),
           ("kl_fresh", "{:.3f}"),
           ("res_stale", "{:.3f}"), ("res_fresh", "{:.3f}"), ("move", "{:.3f}"), ("mass_rare", "{:.3f}"),
           ("freq_rare", "{:.3f}"), ("val_mass_rare", "{:.3f}"), ("val_freq_rare", "{:.3f}"), ("c_norm", "{:.2f}"),
           ("h_norm", "{:.2f}"), ("codewords_rebuilt_diff", "{:.1e}")]


def table(rows: list[dict], title: str) -> str:
    lines = [f"# {title}", "", "| " + " | ".join(c for c, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(f.format(r[c]) if c in r else "-" for c, f in COLUMNS) + " |" for r in rows]
    if len(rows) >= 3:
        ppl = [r["val_ppl"] for r in rows]
        lines += ["", "Spearman over these epochs: val_ppl with kl_stale "
                  f"{spearman(ppl, [r['kl_stale'] for r in rows]):.2f}, with kl_fresh "
                  f"{spearman(ppl, [r['kl_fresh'] for r in rows]):.2f}; kl_fresh with c_norm "
                  f"{spearman([r['kl_fresh'] for r in rows], [r['c_norm'] for r in rows]):.2f}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default="midx_rq")
    p.add_argument("--scale", default="quick")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--index", default="midx_rq", help="for a head without a MIDX sampler: the index built on its classes")
    p.add_argument("--K", type=int, default=32, help="codewords per codebook of that index")
    p.add_argument("--checkpoints", type=Path, help="a folder of the run's epoch checkpoints (copies)")
    p.add_argument("--train", type=int, default=0, help="train this many epochs here instead (quick scale)")
    p.add_argument("--epochs", type=int, default=None, help="override the scale's epochs (with --train)")
    p.add_argument("--plateau", action="store_true",
                   help="with --train: decay the lr by 1/4 after 2 epochs without a 0.1 gain in validation "
                        "perplexity (MIDX Table 4's rule; min lr 1e-6), stop after 10 (outputs named *_plateau)")
    p.add_argument("--correct", default="negatives", help="a sampled head's log-q convention (heads/sampled_softmax.py): "
                   "negatives, the lm table's for every sampled head when this study ran (the table has trained "
                   "Uniform and MIDX under `both` since: studies/lm_logq_convention)")
    p.add_argument("--val-every", type=int, default=5, help="measure the mass on the validation split every N epochs")
    p.add_argument("--again", action="store_true", help="measure every epoch again (default: reuse out/'s rows)")
    p.add_argument("--work", type=Path, default=REPO / "studies" / "midx_kl_drift" / "work")
    p.add_argument("--processed", type=Path, default=REPO / "data" / "processed" / "ptb" / "dataset.npz")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    torch.set_num_threads(1)
    exp = resolve_experiment(load_experiment(REPO / "config" / "experiments" / "xcbench" / "lm.yaml"), a.scale)
    run = make_run(exp, "ptb", a.method, a.seed)
    if run.head["head"] == "sampled_softmax":
        run.head["params"]["correct"] = a.correct                                             # the spec's too
    if a.epochs:
        run.train["epochs"] = a.epochs                                                        # the spec's too
    if a.plateau and not a.train:
        p.error("--plateau sets the schedule of a run trained here: give --train N too")
    if a.plateau:  # the spec's train too: the run's checkpoint is its own
        run.train["schedule"], run.train["plateau"] = "plateau", PLATEAU
    task = task_of(run, dataset_entry("ptb", load_datasets()), str(a.processed), None, CPU)
    name = f"drift_{a.scale}_{a.method}" + ("_plateau" if a.plateau else "")
    folder, result = (train_epochs(run, task, a.train, a.work / a.scale / name) if a.train
                      else (a.checkpoints, {}))
    if folder is None:
        p.error("give --checkpoints DIR (a run's epoch checkpoints) or --train N")
    cks = by_epoch(folder)
    model = model_of(run, task)
    setup_head(model, task, CPU, run.train)
    own = getattr(model.head, "sampler", None)
    sampler = own if own is not None and own.needs_index else SAMPLERS.get(a.index)(task.n_classes, K=a.K)
    count = torch.bincount(task.tokens["train"].long(), minlength=task.n_classes)              # (n,)
    rare = count.argsort()[: int(0.9 * task.n_classes)]                                       # the rarest 90%
    done = {}  # rows measured by an earlier call on the same run (a run's checkpoints come in over hours)
    if (a.out / f"{name}.json").exists() and not a.again:
        done = {r["epoch"]: r for r in read_json(a.out / f"{name}.json")["rows"]}
    rows = []
    for e in sorted(cks):
        if e - 1 in cks:
            on_val = a.val_every > 0 and (e % a.val_every == 0 or e == max(cks))
            old = done.get(e)
            rows.append(old if old and ("val_mass_rare" in old or not on_val)
                        else measure(model, sampler, task, rare, cks[e - 1], cks[e], on_val))
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()}, flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / f"{name}.json", {"scale": a.scale, "method": a.method, "seed": a.seed,
                                        "train": {k: run.train.get(k) for k in ("lr", "schedule", "plateau")},
                                        "result": result, "rows": rows})
    sched = " (lr: MIDX Table 4's plateau rule)" if a.plateau else ""
    tested = (f"\nTest perplexity at the selected epoch {result['best_epoch']} (of {result['epochs_trained']} trained): "
              f"{result['test']['ppl']:.1f}.\n" if result else "")
    write_text(a.out / f"{name}.md", table(rows, f"MIDX's proposal against the softmax, xcbench lm, {a.scale} scale, "
                                                 f"{a.method}, seed {a.seed}{sched}") + tested)


if __name__ == "__main__":
    main()
