"""Step rate of an experiment's methods at any scale: how long an epoch and a run will take here.

For every method of one experiment file, on one prepared dataset, this builds the task and model
exactly as `python -m xcbench train` does (run.make_run / train.model_of / make_optimizer),
builds the head's index once (`on_epoch_start`, timed apart), then times `--steps` training steps
(train.train_step: loss, backward, clipping, optimizer, after-step hook) after one warm-up step and
one evaluation pass over the task's validation splits. Projection: epoch = batches x (median step +
median wait for its batch, which lazily generated rows make long: data/faces.py) + evaluation;
run = epochs x epoch. Use it before a paper-scale run, e.g.

    python benchmarks/train_step.py --experiment config/experiments/rff/fig3.yaml --scale paper \\
        --dataset ptb --processed data/processed/ptb/dataset.npz

Writes benchmarks/out/train_step_<paper>_<artifact>_<scale>.{json,md}.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch
from built import build
from common import write_outputs
from floors import gemm_gflops, matmul_flop_formulas, optimizer_seconds, sync, syncs_of_a_step
from torch.utils.flop_counter import FlopCounterMode

OUT = Path(__file__).resolve().parent / "out"


def one(exp: dict, task, dataset: str, method: str, device: torch.device, steps: int, seed: int = 0,
        evaluate: bool = True, draws: str | None = None, warmup: int = 1, cuda_graph: bool = False,
        rows: dict | None = None) -> dict:
    """One method's step rate. `cuda_graph`: its steps replayed from a captured CUDA graph, as `train.cuda_graph`
    runs them (graphs.py; draws on the device; its eager warm-up and capture steps are untimed). `rows`: the
    epoch projected over {"train": rows trained on, "val": rows evaluated} instead of the task's own (a shape
    proxy's: shape_proxy.py): batches = ceil(train / batch size), evaluation time scaled by val / proxy_val."""
    from xcbench import graphs
    from xcbench.seed import draws_device, torch_generator
    from xcbench.step import evaluate_splits, train_step

    spec, train_cfg, model, opt = build(exp, task, dataset, method, device, seed, "device" if cuda_graph else draws)
    draws = train_cfg.get("draws", "cpu")
    graphs.check({**train_cfg, "cuda_graph": cuda_graph}, device, model.head)  # a clear error where it cannot be had
    t0 = time.perf_counter()
    model.head.on_epoch_start(0, torch_generator(seed, "index"))
    sync(device)
    build_s = time.perf_counter() - t0
    bs, loss_gen = int(train_cfg["batch_size"]), torch_generator(seed, "loss", draws_device(draws, device))
    clip = train_cfg.get("grad_clip")
    graphed = graphs.GraphedStep(lambda x, y, idx: train_step(model, opt, x, y, idx, loss_gen, 0, clip),
                                 (loss_gen,)) if cuda_graph else None

    def step(x, y, idx, k: int):
        return graphed(x, y, idx) if graphed else train_step(model, opt, x, y, idx, loss_gen, k, clip)

    times, waits = [], []   # the step; the wait for its batch (rows generated per batch: data/faces.py)
    # untimed first steps: the first also counts FLOPs; more reach the steady state (a graph: its capture too)
    warmup = max(1, warmup, graphs.WARMUP + 1 if cuda_graph else 1)
    batches = itertools.islice(task.train_batches(bs, torch_generator(seed, "batches")), steps + warmup)
    for i in range(steps + warmup):
        t0 = time.perf_counter()
        x, y, idx = next(batches)
        sync(device)
        waits.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        if i == 0:  # the untimed warm-up step also counts the step's matrix-product FLOPs (forward and backward)
            try:
                with FlopCounterMode(display=False, custom_mapping=matmul_flop_formulas()) as counter:
                    step(x, y, idx, i + 1)
                matmul_flops = counter.get_total_flops()
            except (RuntimeError, NotImplementedError) as e:  # an operator the counter cannot trace: no floor
                print(f"train_step: {method}: no FLOP count ({type(e).__name__}: {e})", flush=True)
                matmul_flops = float("nan")
        else:
            step(x, y, idx, i + 1)
        sync(device)
        times.append(time.perf_counter() - t0)
    # the same steps back to back, one synchronisation at the end: what the training loop sees when nothing
    # inside a step waits for the GPU (xcbench.train reads the loss sum every CHECK_EVERY steps)
    batches = list(itertools.islice(task.train_batches(bs, torch_generator(seed, "batches")), steps))
    sync(device)
    t0 = time.perf_counter()
    for i, (x, y, idx) in enumerate(batches):
        step(x, y, idx, steps + i + 2)
    sync(device)
    chained_s = (time.perf_counter() - t0) / max(1, len(batches))
    opt_s = optimizer_seconds(opt, steps, device)
    x, y, idx = batches[0]
    syncs = syncs_of_a_step(lambda: step(x, y, idx, 2 * steps + 2), device)
    model.eval()
    t0 = time.perf_counter()
    if evaluate:  # --skip-eval: at 750K identities scoring every validation row against every class takes minutes
        evaluate_splits(model, task)
    eval_s = time.perf_counter() - t0 if evaluate else float("nan")
    model.train()  # later phases step as training does (dropout on)
    step_s, nb, epochs = statistics.median(times[warmup:]), task.n_train_batches(bs), int(train_cfg["epochs"])
    if rows:  # evaluation is linear in its rows (each scored against every class)
        nb, eval_s = -(-rows["train"] // bs), eval_s * rows["val"] / rows["proxy_val"]
    data_s = statistics.median(waits[warmup:])
    sel = getattr(model.head, "selector", None)
    phases = [{"from_epoch": 0, **({"trees": sel.trees, "T": sel.rebuild_every} if hasattr(sel, "phase_epochs") else {}),
               "step_ms": 1e3 * step_s, "index_build_s": build_s, "builds_per_epoch": builds_per_epoch(model.head, nb, epochs)}]
    for e in phase_starts(model.head, epochs)[1:]:  # HF-A: each later phase's trees and T, timed at its start
        phases.append(time_phase(model.head, e, nb, batches, step, device, torch_generator(seed, "index")))
    ends = [p["from_epoch"] for p in phases[1:]] + [epochs]
    for p, end in zip(phases, ends):  # no evaluation when skipped
        p["epochs"] = end - p["from_epoch"]
        p["epoch_s"] = nb * (p["step_ms"] / 1e3 + data_s) + (eval_s if evaluate else 0.0) + \
            p["builds_per_epoch"] * p["index_build_s"]
    epoch_s = sum(p["epochs"] * p["epoch_s"] for p in phases) / epochs
    builds = sum(p["epochs"] * p["builds_per_epoch"] for p in phases) / epochs
    return {"method": method, "head": spec["head"], "step_ms": 1e3 * step_s, "data_ms": 1e3 * data_s,
            "chained_step_ms": 1e3 * chained_s, "optimizer_ms": 1e3 * opt_s,
            "draws": draws, "cuda_graph": bool(graphed and graphed.replays),
            "syncs_per_step": sum(syncs.values()) if device.type == "cuda" else None,
            "sync_sources": syncs, "flops_counted": "matmul+rnn",
            "matmul_gflop": matmul_flops / 1e9,
            "read_ahead": task.read_ahead, "steps_timed": len(times) - warmup, "warmup_steps": warmup,
            "index_build_s": build_s, "builds_per_epoch": builds, "eval_s": eval_s, "batches_per_epoch": nb, "epochs": epochs,
            "epoch_s": epoch_s, "run_h": epochs * epoch_s / 3600, **({"phases": phases} if len(phases) > 1 else {})}


def kept_rows(path: Path, measuring: set[str]) -> list[dict]:
    """--merge: the rows of an earlier output at `path` whose method is not among those measured now."""
    return [r for r in json.loads(path.read_text()) if r["method"] not in measuring] if path.exists() else []


def proxy_rows(task, n: int | None = None, scale: float | None = None) -> dict:
    """The rows an epoch of the real dataset trains on and evaluates, beside the proxy's own: from its n training
    rows split as the task splits them (`val_frac` held out for validation; XMC), or (`scale`) as `scale` copies of
    the proxy's windows and validation queries (seqrec: the real set's users over the proxy's, at one length)."""
    if scale is not None:
        tr, va = task.n_train_batches(1), task.info["n_val_queries"]
        return {"train": round(tr * scale), "val": round(va * scale), "proxy_train": tr, "proxy_val": va}
    val = int(round(n * task.info["val_frac"]))
    return {"train": n - val, "val": val, "proxy_train": task.info["n_train"], "proxy_val": task.info["n_val"]}


def phase_starts(head, epochs: int) -> list[int]:
    """The epochs at which an adaptive selector (HF-A) starts a phase with its next trees and T; [0] for others."""
    every = getattr(getattr(head, "selector", None), "phase_epochs", None)
    return list(range(0, epochs, every)) if every else [0]


def time_phase(head, epoch: int, nb: int, batches: list, step, device: torch.device, gen: torch.Generator) -> dict:
    """HF-A as training meets it at the start of `epoch`: the phase's trees and T (progress epoch / epochs), its
    forest built (timed), then the steps of `batches` after the first, untimed."""
    t0 = time.perf_counter()
    head.on_epoch_start(epoch * nb, gen)  # the phase start: adapt, then rebuild
    sync(device)
    build_s = time.perf_counter() - t0
    times = []
    for i, (x, y, idx) in enumerate([batches[0], *batches]):
        t0 = time.perf_counter()
        step(x, y, idx, epoch * nb + i + 1)
        sync(device)
        times.append(time.perf_counter() - t0)
    sel = head.selector
    return {"from_epoch": epoch, "trees": sel.trees, "T": sel.rebuild_every, "step_ms": 1e3 * statistics.median(times[1:]),
            "index_build_s": build_s, "builds_per_epoch": builds_per_epoch(head, nb, 1)}


def builds_per_epoch(head, nb: int, epochs: int) -> float:
    """How often an epoch of nb steps builds the head's index, on average: a selective head's selector every
    `rebuild_every` steps, counted across epochs (nb / T; HF-A at its first phase's T), or once for the whole
    run where T is None (1 / epochs); a sampler's index at each epoch start (1)."""
    sel = getattr(head, "selector", None)
    if sel is None or not sel.needs_index:
        return 1.0
    return nb / sel.rebuild_every if sel.rebuild_every else 1.0 / epochs


def table(rows: list[dict], title: str) -> str:
    lines = [f"# {title}", "", "| method | draws | ms / step | chained ms / step | optimizer ms | host syncs / step | "
             "matmul floor ms | data wait ms | index build s | builds / epoch | eval s | batches / epoch | epoch (min) | "
             "epochs | run (h) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        floor = f"{r['floor_ms']:.1f}" if r.get("floor_ms") == r.get("floor_ms") and "floor_ms" in r else "-"  # nan: -
        syncs = "-" if r.get("syncs_per_step") is None else r["syncs_per_step"]
        opt_ms = f"{r['optimizer_ms']:.1f}" if "optimizer_ms" in r else "-"  # records before it was timed: -
        builds = f"{r['builds_per_epoch']:.3g}" if "builds_per_epoch" in r else "-"
        lines.append(f"| {r['method']} | {r.get('draws', 'cpu')} | {r['step_ms']:.1f} | {r.get('chained_step_ms', float('nan')):.1f} | "
                     f"{opt_ms} | {syncs} | {floor} | {r['data_ms']:.1f} | {r['index_build_s']:.2f} | {builds} | "
                     f"{r['eval_s']:.1f} | {r['batches_per_epoch']:,} | {r['epoch_s'] / 60:.1f} | {r['epochs']} | {r['run_h']:.2f} |")
    if rows and "gemm_gflops" in rows[0]:
        lines += ["", f"matmul floor: the step's matrix-product FLOPs (torch's FlopCounterMode, forward and backward; "
                  f"fused LSTM layers, which it counts as 0, by formula, and products with a sparse operand at its stored entries: "
                  "floors.matmul_flop_formulas) at "
                  f"this device's float32 rate measured in the same run ({rows[0]['gemm_gflops']:.0f} GFLOP/s, a "
                  "2048^3 product); gathers, element-wise work and launches are not in it. ms / step: each step "
                  "timed alone (synchronised before and after); chained: the same number of steps back to back, one "
                  "synchronisation at the end, per step. Optimizer ms: the optimizer's update alone (part of ms / step), "
                  "repeated on the last step's gradients. Epoch: batches x (ms / step + data wait) + eval + builds / "
                  "epoch x index build (a selector rebuilt every T steps: batches / T; built once per run: 1 / epochs). "
                  "Host syncs: the synchronising CUDA calls one step makes (torch.cuda.set_sync_debug_mode), by source "
                  "line in the .json."]
    phased = [r["method"] for r in rows if r.get("phases")]
    if phased:
        lines += ["", f"{', '.join(phased)}: an adaptive selector, timed at the start of each of its phases with that "
                  "phase's trees and T (`phases` in the .json); ms / step and index build s are its first phase's, "
                  "builds / epoch, epoch (min) and run (h) the mean and the sum over its phases."]
    return "\n".join(lines) + "\n"


def run_args(p: argparse.ArgumentParser) -> None:
    """The arguments that name one experiment's runs on one prepared dataset (train_concurrency.py too)."""
    p.add_argument("--experiment", required=True)
    p.add_argument("--scale", default="paper")
    p.add_argument("--dataset", required=True)
    p.add_argument("--processed", required=True, help="data/processed/<dataset>/dataset.npz (snakemake builds it)")
    p.add_argument("--features", default=None, help="data/features/<dataset>/<extractor><dim>.pt where the task uses one")


def with_logits(exp: dict, method: str, logits: str | None) -> dict:
    """`exp` with one sampled method's `params.logits` replaced (None: `exp` itself)."""
    if logits is None:
        return exp
    spec = exp["methods"][method]
    return {**exp, "methods": {**exp["methods"], method: {**spec, "params": {**spec.get("params", {}), "logits": logits}}}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    run_args(p)
    p.add_argument("--methods", nargs="*", default=None, help="default: every method of the experiment")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--read-ahead", type=int, default=None, help="threads generating lazy batches ahead (as "
                   "`xcbench train --read-ahead`; default: 0 on the CPU, up to 4 with a GPU)")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of this process (as `xcbench train "
                   "--threads`; default: torch's, all cores)")
    p.add_argument("--draws", nargs="+", default=[None], choices=["cpu", "device"],
                   help="train.draws to time (default: the experiment's); several: each method once per choice")
    p.add_argument("--logits", nargs="+", default=[None], choices=["gather", "all", "sparse"],
                   help="a sampled head's `logits` route to time (default: the experiment's); several: each sampled "
                        "method once per route, its row named `method (route)`; other heads are left out")
    p.add_argument("--name", help="output name in benchmarks/out (default train_step_<paper>_<artifact>_<scale>)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps before the timed ones (default 1). A sampled "
                   "head under dense Adam needs ~40 on the CPU: its first steps take sqrt over zero second moments, "
                   "several times slower than over positive ones (studies/adam_zero_rows)")
    p.add_argument("--note", default="", help="appended to the table's title: the conditions of the measurement "
                   "(e.g. 'one thread beside two one-thread trainings')")
    p.add_argument("--cuda-graph", action="store_true", help="steps replayed from a captured CUDA graph, as "
                   "`train.cuda_graph: true` runs them (draws on the device); a method whose head cannot be "
                   "captured is left out, with why")
    p.add_argument("--skip-eval", action="store_true",
                   help="do not time an evaluation (eval s: nan; epoch and run times then leave it out)")
    p.add_argument("--nondeterministic", action="store_true",
                   help="CUDA: torch's default (atomic) kernels instead of the deterministic ones `xcbench train` uses")
    p.add_argument("--out-dir", type=Path, default=OUT, help="where the .json and .md go (default benchmarks/out)")
    p.add_argument("--merge", action="store_true", help="keep the rows of an earlier output of this name for the "
                   "methods not measured now (a method measured apart, e.g. where it needs more memory)")
    p.add_argument("--epoch-rows", type=int, default=None, metavar="N",
                   help="project the epoch over N rows (the real dataset's training rows, before its validation split) "
                        "instead of --processed's: --processed is a shape proxy of --dataset (benchmarks/shape_proxy.py)")
    p.add_argument("--epoch-scale", type=float, default=None, metavar="F",
                   help="project the epoch over F times --processed's training and validation rows: --processed is "
                        "a shape proxy of --dataset with 1/F of its users (seqrec; benchmarks/shape_proxy.py)")
    a = p.parse_args()
    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.device import deterministic_kernels, device_name, pick_device
    from xcbench.runtime import configure_process
    from xcbench.schema import ConfigError
    from xcbench.tasks.base import make_task

    configure_process(a.threads)  # the allocator and thread settings `xcbench train --threads` uses
    exp = resolve_experiment(load_experiment(a.experiment), a.scale)
    for f in (a.processed, a.features):
        if f and not Path(f).exists():
            raise SystemExit(f"train_step: {f} does not exist; build it first: snakemake --cores all {f}")
    device = pick_device(a.device)
    if not a.nondeterministic:
        deterministic_kernels(device)
    task = make_task(exp, dataset_entry(a.dataset, load_datasets()), a.processed, a.features, device, 0,
                     dataset=a.dataset)
    task.read_ahead = a.read_ahead
    shape = proxy_rows(task, a.epoch_rows, a.epoch_scale) if a.epoch_rows or a.epoch_scale else None
    rate = gemm_gflops(device)
    name = a.name or f"train_step_{exp['paper']}_{exp['artifact']}_{a.scale}"
    methods = [(m, d, lg) for m, d, lg in itertools.product(a.methods or list(exp["methods"]), a.draws, a.logits)
               if lg is None or exp["methods"][m].get("head") == "sampled_softmax"]
    rows = kept_rows(a.out_dir / f"{name}.json", {m for m, _, _ in methods}) if a.merge else []
    for i, (method, draws, logits) in enumerate(methods):
        try:
            r = one(with_logits(exp, method, logits), task, a.dataset, method, device, a.steps,
                    evaluate=not a.skip_eval, draws=draws, warmup=a.warmup, cuda_graph=a.cuda_graph, rows=shape)
        except ConfigError as e:  # --cuda-graph on a head that cannot be captured (or without a GPU)
            print(f"train_step: {method}: left out: {e}", flush=True)
            continue
        if logits:  # a route other than the run's: its own row name, which no run's plan entry reads
            r = {**r, "method": f"{method} ({logits})", "logits": logits}
        rows.append({**r, "floor_ms": 1e3 * r["matmul_gflop"] / rate, "gemm_gflops": rate,
                     "paper": exp["paper"], "artifact": exp["artifact"], "dataset": a.dataset, "scale": a.scale,
                     "device": device_name(device), "torch": torch.__version__,
                     "kernels": "atomic" if a.nondeterministic else "deterministic",
                     **({"shape_proxy": {**shape, "proxy": a.processed}} if shape else {})})
        print(json.dumps(rows[-1]), flush=True)
        # written after every method (atomically): a run cut short keeps what it measured
        done = "" if i + 1 == len(methods) else f"; {i + 1} of {len(methods)} methods measured so far"
        warm = "a warm-up" if a.warmup <= 1 else f"{a.warmup} warm-up steps"
        title = (f"Step rate: {exp['paper']}/{exp['artifact']} at scale {a.scale} on {a.dataset} "
                 f"({rows[0]['device']}{', atomic kernels' if a.nondeterministic else ''}"
                 f"{', steps replayed from CUDA graphs' if a.cuda_graph else ''}; "
                 f"median of {a.steps} steps after {warm}; projected times{done})" + (f"; {a.note}" if a.note else ""))
        write_outputs(name, rows, table(rows, title), a.out_dir)
    print(table(rows, title) if rows else "train_step: no method to measure")


if __name__ == "__main__":
    main()
