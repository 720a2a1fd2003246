"""Where one method's training step spends its time: torch.profiler over a few steps at any scale.

Builds the task and model as benchmarks/train_step.py does (the same experiment/dataset arguments),
runs the head's index build and 3 warm-up steps, then profiles `--steps` steps and prints the
operators by total self time (CPU and, on a GPU, CUDA), e.g. why HF-A's step on the H100 is 30x Full's:

    python benchmarks/profile_step.py --experiment config/experiments/class_selection/table2_epochs.yaml \\
        --dataset synthetic-faces-87k --processed data/processed/synthetic-faces-87k/dataset.npz --method hf_a
"""

from __future__ import annotations

import argparse
import itertools

import torch
from built import build, experiment_task
from torch.profiler import ProfilerActivity, profile
from train_step import run_args


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    run_args(p)
    p.add_argument("--method", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--device", default="auto")
    p.add_argument("--rows", type=int, default=25, help="operators printed")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (as `xcbench train --threads`)")
    p.add_argument("--by-shape", action="store_true", help="one row per operator and input shapes (which "
                   "tensor a gather or fill is spent on)")
    a = p.parse_args()
    from xcbench.device import pick_device
    from xcbench.runtime import configure_process
    from xcbench.seed import torch_generator
    from xcbench.step import train_step

    configure_process(a.threads)  # the allocator and threads as `xcbench train` sets them (else large blocks fault)
    device = pick_device(a.device)
    exp, task = experiment_task(a.experiment, a.scale, a.dataset, a.processed, a.features, device)
    _, train_cfg, model, opt = build(exp, task, a.dataset, a.method, device)
    model.head.on_epoch_start(0, torch_generator(0, "index"))
    loss_gen = torch_generator(0, "loss")
    batches, epoch = [], 0
    while len(batches) < a.steps + 3:  # a small set (MovieLens-100K: 4 batches) takes several epochs' batches
        more = task.train_batches(int(train_cfg["batch_size"]), torch_generator(epoch, "batches"))
        batches += list(itertools.islice(more, a.steps + 3 - len(batches)))
        epoch += 1
    step = lambda i: train_step(model, opt, *batches[i], loss_gen, i + 1, train_cfg.get("grad_clip"))  # noqa: E731
    for i in range(3):
        step(i)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts, record_shapes=a.by_shape) as prof:
        for i in range(3, 3 + a.steps):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    for k in dict.fromkeys(["self_cpu_time_total", key]):
        print(f"== {a.method}: {a.steps} steps on {device}, by {k}")
        print(prof.key_averages(group_by_input_shape=a.by_shape).table(sort_by=k, row_limit=a.rows, max_name_column_width=60))


if __name__ == "__main__":
    main()
