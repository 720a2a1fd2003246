"""One run's model and optimizer built as `python -m xcbench train` builds them, for the benchmarks and studies
that time or compare its steps (train_step.py, profile_step.py, optimizers.py, studies/*/probe.py), and the
weights after N of its steps, whose digest tells two process settings' runs apart bit for bit.
"""

from __future__ import annotations

import functools
import itertools

import torch


def build(exp: dict, task, dataset: str, method: str, device: torch.device, seed: int = 0,
          draws: str | None = None) -> tuple:
    """(method spec, train config, model, optimizer) of one run as `xcbench train` builds them, the head set
    up and the model in training mode; the head's index is not built yet (callers time it apart).
    `draws`: the run's `train.draws` replaced (None: the experiment's)."""
    from xcbench.run import make_run
    from xcbench.step import make_optimizer, setup_head
    from xcbench.train import model_of

    run = make_run(exp, dataset, method, seed)
    train_cfg = {**run.train, "draws": draws} if draws else run.train
    model = model_of(run, task).to(device)
    opt = make_optimizer(model, train_cfg)
    setup_head(model, task, device, train_cfg)
    model.train()
    return run.head, train_cfg, model, opt


def experiment_task(experiment: str, scale: str, dataset: str, processed: str, features: str | None,
                    device: torch.device) -> tuple[dict, object]:
    """(resolved experiment, task) of one experiment file on one prepared dataset, as `xcbench train` builds them."""
    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.tasks.base import make_task

    exp = resolve_experiment(load_experiment(experiment), scale, check_libraries=False)
    return exp, make_task(exp, dataset_entry(dataset, load_datasets()), processed, features, device, 0, dataset=dataset)


def weights_after_steps(experiment: str, scale: str, dataset: str, processed: str, method: str, steps: int,
                        run_step=lambda step: step(), features: str | None = None) -> str:
    """`steps` training steps of one run from its seed-0 start on the CPU, as `xcbench train` takes them
    (deterministic kernels, the global generator seeded for dropout), each run as `run_step(step)` so that a
    caller can measure it; the first 16 hex digits of the sha256 of the weights after them (equal digests: the
    same weights bit for bit); `features`: the features file where the task reads one. The studies that compare
    process settings (allocator, huge pages) call it in a fresh process per setting, after configuring that process."""
    import hashlib

    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.device import deterministic_kernels
    from xcbench.seed import seed_global, torch_generator
    from xcbench.step import train_step
    from xcbench.tasks.base import make_task

    exp = resolve_experiment(load_experiment(experiment), scale)
    dev = torch.device("cpu")
    deterministic_kernels(dev)
    seed_global(0)
    task = make_task(exp, dataset_entry(dataset, load_datasets()), processed, features, dev, 0, dataset=dataset)
    _, cfg, model, opt = build(exp, task, dataset, method, dev)
    model.head.on_epoch_start(0, torch_generator(0, "index"))
    gen = torch_generator(0, "loss")
    batches = itertools.islice(task.train_batches(int(cfg["batch_size"]), torch_generator(0, "batches")), steps)
    for i, (x, y, idx) in enumerate(batches):
        run_step(functools.partial(train_step, model, opt, x, y, idx, gen, i + 1, cfg.get("grad_clip")))
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def steps_in_turn(runs: dict, batches: list, warmup: int = 2) -> dict[str, list[float]]:
    """Seconds of each training step per form, the forms stepping in turn on the same batches (one load for all):
    `runs[form] = (model, opt, loss generator, train config, step)`, `step(model, opt, x, y, idx, gen, i, clip)`
    as step.train_step; each form keeps its own torch global generator (dropout's), equal at the start, so forms
    that compute the same update end with the same weights. The first `warmup` steps are not timed."""
    import time

    times = {f: [] for f in runs}
    rng = {f: torch.random.get_rng_state() for f in runs}
    for i, (x, y, idx) in enumerate(batches):
        for f, (model, opt, gen, cfg, step) in runs.items():
            torch.random.set_rng_state(rng[f])
            t0 = time.perf_counter()
            step(model, opt, x, y, idx, gen, i + 1, cfg.get("grad_clip"))
            if i >= warmup:
                times[f].append(time.perf_counter() - t0)
            rng[f] = torch.random.get_rng_state()
    return times


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Every parameter of a equals b's, bit for bit."""
    return all(torch.equal(p.detach(), q.detach()) for p, q in zip(a.parameters(), b.parameters()))
