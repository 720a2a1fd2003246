"""What a DAG train job does with one run (run.Run): `execute` writes its settings, then trains it
(`fit`, the method-agnostic loop over any Model) or, for a task that trains nothing, measures it, and
writes its result folder (what it holds: records.py). One update and its helpers: step.py.

Per epoch: set the scheduled learning rate, call `head.on_epoch_start(step, gen)` (index rebuilds
with an explicit generator), run the batches (order from an explicit generator), evaluate on the
validation split, add the head's per-epoch metrics on a fixed probe batch and the parts of a
composite loss (`train_loss_main`, `train_loss_aux`), append to the history, update model
selection (`select:`, selection.py) and save a checkpoint atomically. A rerun finds the
checkpoint and resumes after the last finished epoch with identical model, optimizer, generators,
global-RNG and selection state (the best epoch's weights included), so an interrupted run resumed
gives the same final metrics as an uninterrupted one. Epochs longer than `FitOptions.checkpoint_minutes`
(`xcbench train --checkpoint-minutes`; not a setting of the run) also checkpoint inside the epoch
when the head keeps no state outside its parameters (`Head.resumes_mid_epoch`): the epoch's
batch-order generator state, the batches done and the partial sums, so a resumed run redraws the same
order, skips what was done and ends identical. Such a head also checkpoints after the current batch on
SIGUSR1 (and goes on) or SIGTERM (and exits 143): a scheduler's time limit costs one step
(checkpoint.Signals). `test` is evaluated on the selected epoch
(the last one without `select:`). A non-finite loss stops the run with an error naming epoch, step
and the fix. Wall time and peak memory are recorded (docs/design.md, Results).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from xcbench.checkpoint import CHECKPOINT, Signals, load_checkpoint, set_generator_state, stop_after
from xcbench.config import ConfigError
from xcbench.device import deterministic_kernels
from xcbench.graphs import GraphedStep
from xcbench.graphs import check as graphs_wanted
from xcbench.io import remove_stale_temps, torch_save, write_json, write_text, write_yaml
from xcbench.model import Model, build_model
from xcbench.records import LOG, format_values, history_csv, log_epoch, progress, resolved_config, run_metrics, run_record
from xcbench.run import Run
from xcbench.seed import draws_device, seed_global, torch_generator
from xcbench.selection import BestEpoch
from xcbench.step import (
    CHECK_EVERY,
    TrainingDiverged,
    check_finite,
    evaluate_splits,
    make_optimizer,
    make_schedule,
    memory_report,
    setup_head,
    train_step,
)

REQUIRED_TRAIN = ("epochs", "batch_size", "lr")


@dataclass(frozen=True)
class FitOptions:
    """How a job runs, not what it computes (none of these is part of the run spec)."""
    checkpoint_minutes: float = 0.0   # also checkpoint inside an epoch this often (heads that allow it)
    finish: bool = False              # end a run from its checkpoint: no more epochs, test the best so far
    stop_after: int | None = None     # pause after this many epochs, the checkpoint kept
    interrupt_after: float | None = None  # tests: raise KeyboardInterrupt after this many epochs (fractions: mid-epoch)


def _probe_h(model: Model, task) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = task.probe_batch()
    with torch.no_grad():
        return model.encode(x)[0], y


def fit(model: Model, task, train_cfg: dict, out_dir: Path, seed: int, device: torch.device,
        options: FitOptions = FitOptions(), spec: dict | None = None, signals: Signals | None = None) -> dict:
    """Train `model` on `task` (module docstring); `spec` (Run.spec) ties the checkpoint to the run; `signals`
    (entered by the caller) brings SIGUSR1/SIGTERM's requests for a checkpoint between batches."""
    sig = signals or Signals(mid_epoch=False)  # not entered: no handler, never asked
    interrupt_after = options.interrupt_after
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out_dir)  # a write cut by SIGKILL left its temp file; the run owns this folder
    epochs, bs = int(train_cfg["epochs"]), int(train_cfg["batch_size"])
    opt = make_optimizer(model, train_cfg)
    sched = make_schedule(train_cfg)
    select = BestEpoch(**train_cfg["select"]) if train_cfg.get("select") else None
    gen = torch_generator(seed, "batches")
    loss_gen = torch_generator(seed, "loss", draws_device(train_cfg.get("draws", "cpu"), device))
    index_gen = torch_generator(seed, "index")
    seed_global(seed)
    deterministic_kernels(device)
    history, start, elapsed, cut_short, resume = [], 0, 0.0, None, (0, None)
    nb = task.n_train_batches(bs)
    ckpt_path = out_dir / CHECKPOINT
    model.to(device)
    setup_head(model, task, device, train_cfg)
    ck = load_checkpoint(ckpt_path, spec)
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        for g, k in ((gen, "gen"), (loss_gen, "loss_gen"), (index_gen, "index_gen")):
            set_generator_state(g, ck[k], ckpt_path)
        torch.set_rng_state(ck["global_rng"])
        if device.type == "cuda" and ck.get("cuda_rng") is not None:  # dropout's stream on the GPU
            torch.cuda.set_rng_state(ck["cuda_rng"], device)
        history, start, elapsed = ck["history"], ck["epoch"], ck["elapsed"]
        if ck.get("step"):  # a checkpoint inside epoch start + 1: redraw its batch order, skip the batches done
            gen.set_state(ck["epoch_gen"])
            resume = (ck["step"], ck["partial"])
        sched.load_state_dict(ck["schedule"])
        if select:
            select.load_state_dict(ck["select"])
        if ck.get("stopped"):
            start = epochs
        elif options.finish:  # cut short by the user (`xcbench train --finish`): no more epochs
            cut_short = round(start + resume[0] / nb, 3) if resume[0] else start
            start = epochs
        within = f", batch {resume[0]}/{nb} of the next" if resume[0] else ""
        print(f"finishing {out_dir}: cut short after epoch {int(cut_short)}{within} of {epochs}, tested at its best epoch"
              if cut_short is not None else f"resuming {out_dir} after epoch {start}/{epochs}{within}")
    elif options.finish:
        raise FileNotFoundError(f"{ckpt_path}: --finish ends a run from its checkpoint, and there is none")
    elif task.eval_at_start:
        model.eval()
        history.append({"epoch": 0, "lr": 0.0, "train_loss": None, "epoch_time_s": 0.0, **evaluate_splits(model, task)})
    label = (f"{spec['dataset']}/{spec['method']}" if spec  # the run's names, wherever --out points
             else f"{out_dir.parent.parent.name}/{out_dir.parent.name}")  # <dataset>/<method> of .../<dataset>/<method>/seedK
    if ck is not None:  # the epochs before the resume, again: a DAG job's log is rewritten when it restarts
        for rec in history:
            if rec["epoch"] >= 1:
                log_epoch(label, rec, epochs, None)
    check_every = 1 if device.type == "cpu" else CHECK_EVERY  # reading the loss sum on a GPU waits for it
    clip = train_cfg.get("grad_clip")
    graphed = GraphedStep(lambda x, y, idx: train_step(model, opt, x, y, idx, loss_gen, 0, clip),
                          (loss_gen,)) if graphs_wanted(train_cfg, device, model.head) else None
    every_s = 60 * float(options.checkpoint_minutes or 0) if model.head.resumes_mid_epoch else 0.0
    state = lambda: {"model": model.state_dict(), "optimizer": opt.state_dict(), "gen": gen.get_state(),  # noqa: E731
                     "loss_gen": loss_gen.get_state(), "index_gen": index_gen.get_state(),
                     "global_rng": torch.get_rng_state(), "history": history,
                     "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None, "elapsed": elapsed,
                     "schedule": sched.state_dict(), "select": select.state_dict() if select else None, "spec": spec}
    for epoch in tqdm(range(start, epochs), desc=label, unit="epoch", initial=start, total=epochs, disable=None):
        (skip, partial), resume = resume, (0, None)
        t0 = last_save = time.perf_counter()
        lr = sched.lr_at(epoch, epochs)
        for g in opt.param_groups:
            g["lr"] = lr
        model.train()
        if not skip:  # resumed inside the epoch: its start (index builds, HF-A's phase) is in the checkpoint
            stop_after(options.stop_after, epoch, epochs, out_dir)  # --stop-after N: N epochs trained (this run or before)
            model.head.on_epoch_start(epoch * nb, index_gen)
        if graphed:  # a new learning rate, rebuilt indices: capture again
            graphed.reset()
        epoch_gen = gen.get_state()  # before this epoch's permutation: what a checkpoint inside the epoch stores
        total, count, parts, t_before = partial or (0.0, 0, {}, 0.0)
        total = torch.tensor(total, dtype=torch.float64, device=device)  # the sum of losses stays on the device
        batches = tqdm(task.train_batches(bs, gen, start=skip), total=nb, initial=skip, leave=False,
                       desc=f"epoch {epoch + 1}", disable=None)
        tick = progress(label, epoch + 1, nb, skip) if batches.disable else lambda step: None
        sig.armed = True  # between batches: a signal's checkpoint can be saved after the current one
        for step, (x, y, idx) in enumerate(batches, start=skip):
            tick(step)
            loss = (graphed(x, y, idx) if graphed else
                    train_step(model, opt, x, y, idx, loss_gen, epoch * nb + step + 1, clip))
            total += loss.detach().double() * x.shape[0]  # the float64 sum `loss.item() * B` made on the host
            count += x.shape[0]
            for k, v in model.head.loss_parts.items():
                parts[k] = parts.get(k, 0.0) + v * x.shape[0]
            save = step + 1 < nb and (sig.asked is not None or 0 < every_s <= time.perf_counter() - last_save)
            if save or step + 1 == nb or (step + 1) % check_every == 0:
                check_finite(total, out_dir, epoch, step, check_every, lr)
            if save:
                t_in = t_before + time.perf_counter() - t0
                torch_save(ckpt_path, {**state(), "epoch": epoch, "step": step + 1, "epoch_gen": epoch_gen,
                                       "partial": (total.item(), count, parts, t_in), "stopped": False})
                last_save = time.perf_counter()
                sig.saved(f"in epoch {epoch + 1} after batch {step + 1}/{nb}")
                if interrupt_after is not None and epoch < interrupt_after <= epoch + (step + 1) / nb:
                    raise KeyboardInterrupt(f"interrupted in epoch {epoch + 1} after batch {step + 1} (simulated)")
        sig.armed = False
        step_ms = 1000 * (t_before + time.perf_counter() - t0) / max(1, nb)  # training only: before evaluation
        model.eval()
        evals = {**evaluate_splits(model, task), **model.head.epoch_metrics(*_probe_h(model, task))}
        dt = t_before + time.perf_counter() - t0
        elapsed += dt
        history.append({"epoch": epoch + 1, "lr": lr, "train_loss": total.item() / max(1, count), "epoch_time_s": dt,
                        "step_ms": step_ms,
                        **{f"train_loss_{k}": v / max(1, count) for k, v in parts.items()}, **evals})
        stop = sched.observe(evals)
        if select:
            stop = select.update(epoch + 1, evals, model) or stop
        log_epoch(label, history[-1], epochs, elapsed / (epoch + 1))
        torch_save(ckpt_path, {**state(), "epoch": epoch + 1, "stopped": stop})
        sig.saved(f"after epoch {epoch + 1}")
        if interrupt_after is not None and epoch + 1 == interrupt_after:
            raise KeyboardInterrupt(f"interrupted after epoch {epoch + 1} (simulated)")
        if stop:
            break
    model.eval()
    last = model.head.report()  # at the last epoch's state (share of labels back-propagated so far)
    if select:
        select.restore(model)
    test = task.evaluate(model, "test")
    final_train = task.evaluate(model, "train") if train_cfg.get("eval_train", False) else {}
    epoch_times = [h["epoch_time_s"] for h in history if h["epoch"] > 0]
    return {"test": test, "train": final_train, "history": history, "wall_time_s": elapsed,
            "time_per_epoch_s": float(np.mean(epoch_times)) if epoch_times else 0.0,
            "best_epoch": select.best_epoch if select else (history[-1]["epoch"] if history else 0),
            "memory": memory_report(model, opt, device), "head": last, "cut_short_after_epoch": cut_short}


def execute(run: Run, task, out_dir: str | Path, device: torch.device, options: FitOptions = FitOptions()) -> dict:
    """One run's job: record its resolved settings (config.resolved.yaml), then train it and write its
    result folder, or measure it where its task trains nothing (`Task.trains`)."""
    out_dir = Path(out_dir)
    write_yaml(out_dir / "config.resolved.yaml", resolved_config(run, task))
    return train_and_write(run, task, out_dir, device, options) if task.trains else measure_and_write(run, task, out_dir, device)


def model_of(run: Run, task) -> Model:
    """The run's model (encoder and head) sized by its task, its weights drawn from the run's seed."""
    return build_model(run.model, run.head["head"], run.head.get("params", {}), task.in_dim, task.n_classes, run.seed)


def train_and_write(run: Run, task, out_dir: Path, device: torch.device, options: FitOptions = FitOptions()) -> dict:
    """Train one run (`fit`) and write metrics.json and history.csv; the checkpoint goes once the run has
    trained all its epochs (or stopped early), and stays for a run `--finish` ended cut short."""
    missing = [k for k in REQUIRED_TRAIN if k not in run.train]
    if missing:
        raise ConfigError(f"{run.exp['paper']}/{run.exp['artifact']}: train config of {run.method!r} lacks {missing}; "
                          f"task {run.task!r} trains, so its experiment needs `train: {{epochs, batch_size, lr}}`")
    model = model_of(run, task)
    with Signals(model.head.resumes_mid_epoch) as sig:
        res = fit(model, task, run.train, out_dir, run.seed, device, options, spec=run.spec, signals=sig)
    metrics = run_metrics(res, task.n_classes, run_record(run, device, task.inputs))
    write_text(out_dir / "history.csv", history_csv(res["history"]))
    write_json(out_dir / "metrics.json", metrics)
    if res["cut_short_after_epoch"] is None:
        (out_dir / CHECKPOINT).unlink(missing_ok=True)  # finished: the results are the record
    else:  # `--finish` of a cut run: a result to keep now, and a run that can go on later from where it stood
        print(f"checkpoint kept: {out_dir / CHECKPOINT}; the same command without --finish trains the remaining "
              "epochs and rewrites the results (in the DAG: remove metrics.json first)")
    if any(isinstance(v, float) and not math.isfinite(v) for v in res["test"].values()):
        raise TrainingDiverged(f"{out_dir}: non-finite test metrics {res['test']}")
    return metrics


def measure_and_write(run: Run, task, out_dir: Path, device: torch.device) -> dict:
    """A measurement task's job: `task.measure(method spec, seed)`, then a result folder (metrics.json,
    history.csv with one row per measured value) like a training run's."""
    LOG.info("%s measures %s (a measurement: nothing is trained, so no epochs)", run.label, run.task)
    t0 = time.perf_counter()
    values = task.measure(run.head, run.seed)
    wall = time.perf_counter() - t0
    LOG.info("%s measured in %.1f s: %s", run.label, wall, format_values(values))
    metrics = {"metrics": values, "wall_time_s": wall, **run_record(run, device, task.inputs)}
    write_text(out_dir / "history.csv", history_csv([{"metric": k, "value": v} for k, v in values.items()]))
    write_json(out_dir / "metrics.json", metrics)
    return metrics
