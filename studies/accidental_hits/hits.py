"""Does masking accidental hits cost the sampled heads perplexity where the positive is corrected too?

Sampled softmax (heads/sampled_softmax.py) scores target t against m draws s_j ~ q(. | h). A draw s_j = t is an
accidental hit: the head masks it (`hits: mask`, its default and TensorFlow's), the MIDX reference code keeps it
(`hits: keep`). With the exact proposal q = softmax(o) the expected gradient in the logits is w(p_t) (p - e_t): the
full softmax's direction, each example weighted by w; with k ~ Bin(m, 1 - p_t) the draws that miss t,

    correct: both,      hits: keep   w = m / (m + 1)                       the same for every example
    correct: both,      hits: mask   w = E[k / (1 + k)] / (1 - p_t)        m/(m+1) up to m/2 as p_t -> 1
    correct: negatives, hits: keep   w = 1 / (1 + p_t)
    correct: negatives, hits: mask   w = E[k / (m p_t + k)] / (1 - p_t)    within a few percent of 1

(tests/test_samplers.py checks them by Monte Carlo.) So `both` with masked hits weighs the targets the model already
predicts well up to (m+1)/2 times more than the others, and its fixed point is sharper than the data: where a context
is followed by word a 80% of the time and b 20%, p_a solves p_a / p_b = (0.8 w(p_a)) / (0.2 w(p_b)) (`weights`).
A proposal far from the softmax (uniform, unigram) rarely draws the target, so the rule matters only where q is close
to the softmax: MIDX. The tables of MIDX Table 4 and the xcbench lm train MIDX under `both` with masked hits.

    python studies/accidental_hits/hits.py weights                                   # the closed forms (seconds)
    python studies/accidental_hits/hits.py train --experiment midx/table4 --method tf_midx_pq   # a paper-scale run
    python studies/accidental_hits/hits.py render                                     # out/hits_<scale>.md

`train` trains the experiment's run of METHOD with `hits: keep` (every other setting the table's, seed and CPU thread
too) in work/ (resumed from its checkpoint when cut), copies its metrics.json and history.csv to out/runs/, and
measures the hit rate of its proposal on the validation split; `render` sets each run beside the kept table run
(reference/<scale>, `hits: mask`): validation perplexity by epoch, best epoch, test perplexity.
"""

from __future__ import annotations

import argparse
import csv
import math
import shutil
from pathlib import Path

import torch

from xcbench.catalogue import dataset_entry, load_datasets
from xcbench.checkpoint import StopAfter
from xcbench.cli import configure_logging
from xcbench.config import load_experiment, resolve_experiment
from xcbench.io import read_json, write_json, write_text
from xcbench.records import history_csv, run_metrics, run_record
from xcbench.run import make_run
from xcbench.tasks.base import task_of
from xcbench.train import FitOptions, fit, model_of

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
CPU = torch.device("cpu")


def binomial_mean(f, m: int, p: float) -> float:
    """E[f(k)] for k ~ Bin(m, p), summed exactly over k = 0..m."""
    k = torch.arange(m + 1, dtype=torch.float64)
    pmf = torch.distributions.Binomial(m, probs=torch.tensor(p, dtype=torch.float64)).log_prob(k).exp()
    return float((pmf * f(k)).sum())


WEIGHT = {  # w(m, p_t): the example's weight in the expected gradient, exact proposal (module docstring)
    ("both", "keep"): lambda m, p: m / (m + 1),
    ("both", "mask"): lambda m, p: binomial_mean(lambda k: k / (1 + k), m, 1 - p) / (1 - p),
    ("negatives", "keep"): lambda m, p: 1 / (1 + p),
    ("negatives", "mask"): lambda m, p: binomial_mean(lambda k: k / (m * p + k), m, 1 - p) / (1 - p),
}


def fixed_point(m: int, rule: tuple[str, str], pi: float = 0.8, iters: int = 500) -> float:
    """p_a at the fixed point of the expected gradient for a context followed by a with probability pi, else b:
    sum_t pi_t w(p_t) (p - e_t) = 0  <=>  p_a / p_b = pi w(p_a) / ((1 - pi) w(p_b)), by damped iteration."""
    p = pi
    for _ in range(iters):
        r = pi * WEIGHT[rule](m, p) / ((1 - pi) * WEIGHT[rule](m, 1 - p))
        p = 0.5 * p + 0.5 * r / (1 + r)
    return p


def weights_table() -> str:
    ps = (0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99)
    out = ["# Example weights w(p_t) of the expected sampled-softmax gradient with the exact proposal", "",
           "w (p - e_t) is the expected gradient in the logits for an example whose target the softmax gives p_t "
           "(closed forms in hits.py, checked by Monte Carlo in tests/test_samplers.py). The last two columns: a "
           "context followed by word a 80% of the time, p_a at the fixed point, and its cross-entropy above the "
           "data's entropy (0.500 nats).", "",
           "| m | correct | hits | " + " | ".join(f"p_t = {p}" for p in ps) + " | fixed p_a | excess CE (nats) |",
           "|---|---|---|" + "---|" * len(ps) + "---|---|"]
    for m in (20, 100):
        for rule in WEIGHT:
            pa = fixed_point(m, rule)
            ce = -(0.8 * math.log(pa) + 0.2 * math.log(1 - pa)) - -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
            out.append(f"| {m} | {rule[0]} | {rule[1]} | " + " | ".join(f"{WEIGHT[rule](m, p):.3f}" for p in ps)
                       + f" | {pa:.3f} | {ce:.3f} |")
    return "\n".join(out) + "\n"


def run_of(experiment: str, method: str, scale: str, seed: int, dataset: str):
    exp = resolve_experiment(load_experiment(REPO / "config" / "experiments" / f"{experiment}.yaml"), scale)
    run = make_run(exp, dataset, method, seed)
    if run.head["head"] != "sampled_softmax":
        raise SystemExit(f"{experiment}:{method} is a {run.head['head']} head; accidental hits are sampled softmax's")
    run.head.setdefault("params", {})["hits"] = "keep"                        # the spec's head params too
    return run


@torch.no_grad()
def hit_rate(model, task, windows: int = 200, chunk: int = 20) -> dict:
    """On the first `windows` validation windows: the share of the m draws that hit the target, the mean softmax
    p_t and the share of tokens with p_t > 0.5, drawing from the proposal's index rebuilt from the final weights."""
    model.eval()
    head, gen = model.head, torch.Generator().manual_seed(0)
    head.on_epoch_start(0, gen)
    tok, T = task.tokens["val"].long(), task.T
    W = min(windows, (len(tok) - 1) // T)
    hits = n = 0
    pt = []
    for s in range(0, W, chunk):
        e = min(s + chunk, W)
        x = tok[s * T:e * T].view(-1, T)                                                    # (c, T)
        y = tok[s * T + 1:e * T + 1]                                                        # (c T,)
        h, _ = model.encode(x, None)                                                        # (c T, d)
        ids, _ = head.sampler.sample(head._unit(h), head.m, gen)                            # (c T, m)
        hits, n = hits + (ids == y[:, None]).sum().item(), n + ids.numel()
        pt.append(torch.softmax(head.scores(h).double(), 1).gather(1, y[:, None]).squeeze(1))
    p = torch.cat(pt)
    return {"hit_rate": hits / n, "mean_p_t": p.mean().item(), "share_p_t_above_half": (p > 0.5).double().mean().item()}


def train(a) -> None:
    run = run_of(a.experiment, a.method, a.scale, a.seed, a.dataset)
    task = task_of(run, dataset_entry(a.dataset, load_datasets()), str(a.processed), None, CPU)
    model = model_of(run, task)
    work = a.work / a.scale / a.experiment.replace("/", "_") / f"{a.method}_keep_seed{a.seed}"
    try:
        res = fit(model, task, run.train, work, run.seed, CPU, FitOptions(stop_after=a.stop_after), spec=run.spec)
    except StopAfter:
        print(f"paused after {a.stop_after} epochs; the same command resumes from {work}", flush=True)
        return
    out = HERE / "out" / "runs" / a.scale / a.experiment / a.dataset / f"{a.method}_keep" / f"seed{a.seed}"
    metrics = run_metrics(res, task.n_classes, run_record(run, CPU, task.inputs))
    metrics["hits_probe"] = hit_rate(model, task)
    write_text(out / "history.csv", history_csv(res["history"]))
    write_json(out / "metrics.json", metrics)
    shutil.rmtree(work, ignore_errors=True)
    print(f"{a.experiment}:{a.method} hits: keep -> test {res['test']}, probe {metrics['hits_probe']}", flush=True)


def history(folder: Path) -> list[dict]:
    with open(folder / "history.csv") as f:
        return [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f) if float(r["epoch"]) >= 1]


def render(scale: str) -> None:
    rows = []
    for folder in sorted((HERE / "out" / "runs" / scale).glob("*/*/*/*_keep/seed*")):
        experiment = "/".join(folder.relative_to(HERE / "out" / "runs" / scale).parts[:2])
        dataset, method, seed = folder.parts[-3], folder.parts[-2].removesuffix("_keep"), folder.parts[-1]
        kept = REPO / "reference" / scale / "results" / scale / experiment / dataset / method / seed
        for rule, f in (("mask (kept table run)", kept), ("keep", folder)):
            if not (f / "metrics.json").exists():
                continue
            m, h = read_json(f / "metrics.json"), history(f)
            probe = m.get("hits_probe", {})
            rows.append({"run": f"{experiment} {dataset} {method} {seed}", "hits": rule, "epochs": len(h),
                         "best_epoch": m["best_epoch"], "test_ppl": m["metrics"]["ppl"],
                         "val": {int(r["epoch"]): r["val_ppl"] for r in h}, **probe})
    cols = (1, 2, 3, 5, 10, 15, 20, 30, 40)
    out = [f"# Accidental hits masked or kept ({scale} scale): validation perplexity by epoch, test perplexity", "",
           "mask: the table's kept run; keep: the same run (spec, seed, CPU thread) with `hits: keep`. Hit rate: the "
           "share of the proposal's draws that are the target, on 200 validation windows after training; mean p_t: "
           "the softmax's probability of the target there, the hit rate an exact proposal would have.", "",
           "| run | hits | " + " | ".join(f"ep {c}" for c in cols) + " | best epoch | test ppl | hit rate | mean p_t |",
           "|---|---|" + "---|" * len(cols) + "---|---|---|---|"]
    for r in rows:
        v = [f"{r['val'][c]:.1f}" if c in r["val"] else "–" for c in cols]
        hr = f"{r['hit_rate']:.4f}" if "hit_rate" in r else "–"
        mp = f"{r['mean_p_t']:.3f}" if "mean_p_t" in r else "–"
        out.append(f"| {r['run']} | {r['hits']} | " + " | ".join(v)
                   + f" | {r['best_epoch']} | {r['test_ppl']:.1f} | {hr} | {mp} |")
    write_json(HERE / "out" / f"hits_{scale}.json", rows)
    write_text(HERE / "out" / f"hits_{scale}.md", "\n".join(out) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["weights", "train", "render"])
    p.add_argument("--experiment", default="midx/table4", help="<paper>/<artifact> of config/experiments")
    p.add_argument("--method", default="tf_midx_pq")
    p.add_argument("--dataset", default="ptb")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", default="paper")
    p.add_argument("--stop-after", type=int, default=None, help="pause after this many epochs (resumable)")
    p.add_argument("--processed", type=Path, default=None, help="default data/processed/<dataset>/dataset.npz")
    p.add_argument("--work", type=Path, default=HERE / "work")
    a = p.parse_args()
    a.processed = a.processed or REPO / "data" / "processed" / a.dataset / "dataset.npz"
    torch.set_num_threads(1)
    configure_logging()
    if a.what == "weights":
        write_text(HERE / "out" / "weights.md", weights_table())
        print((HERE / "out" / "weights.md").read_text())
    elif a.what == "train":
        train(a)
        render(a.scale)
    else:
        render(a.scale)


if __name__ == "__main__":
    main()
