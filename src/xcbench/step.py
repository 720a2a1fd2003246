"""One training step and what surrounds it, shared by the epoch loop (train.fit), the step-rate
benchmarks and the studies, so that a benchmark times exactly the update a run makes:

    loss = head.loss(encode(x), y);  theta <- opt(theta, grad loss)  (optionally after clipping ||grad||_2)

`setup_head` hands the head its task's statistics and the run's length, `make_optimizer` and
`make_schedule` build the run's optimizer and learning-rate schedule from the registries,
`check_finite` stops a diverged run with the fix, `memory_report` records the bytes a run held
(parameters, gradients, optimizer state, peak resident set; docs/design.md, Results).
"""

from __future__ import annotations

import resource
from pathlib import Path

import torch
from torch import nn

from xcbench.features.base import Dropout
from xcbench.model import Model
from xcbench.optim.weights import clip_grad_norm
from xcbench.registry import OPTIMIZERS, SCHEDULES
from xcbench.runtime import optimizer_step, rss_above_mark
from xcbench.seed import draws_device


class TrainingDiverged(FloatingPointError):
    """The training loss became NaN or infinite."""


def memory_report(model: nn.Module, opt: torch.optim.Optimizer, device: torch.device) -> dict:
    nbytes = lambda ts: int(sum(t.numel() * t.element_size() for t in ts))  # noqa: E731
    params = list(model.parameters()) + list(model.buffers())
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    rep = {"param_bytes": nbytes(params),
           "grad_bytes": nbytes(p for p in model.parameters() if p.requires_grad),
           "optimizer_state_bytes": nbytes(state),
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    above = rss_above_mark()
    if above is not None:  # the job's own peak, above the process it started in (runtime.mark_rss)
        rep["peak_rss_above_start_bytes"] = above
    rep["analytic_bytes"] = rep["param_bytes"] + rep["grad_bytes"] + rep["optimizer_state_bytes"]
    if device.type == "cuda":
        rep["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return rep


def evaluate_splits(model: Model, task) -> dict[str, float]:
    """The per-epoch evaluation: every split in `task.eval_splits`, keys prefixed by the split."""
    return {f"{split}_{k}": v for split in task.eval_splits for k, v in task.evaluate(model, split).items()}


def setup_head(model: Model, task, device: torch.device, train_cfg: dict | None = None) -> None:
    """Hand the task's training statistics (label counts, ...) to the head, on `device`, with the
    run's length (`epochs`, `steps_per_epoch`, `batch_size`) for heads with per-epoch schedules; tell
    the model whether the task pads targets and where its dropout masks are drawn (`train.draws`)."""
    stats = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in task.stats.items()}
    model.padded_targets = task.pads_targets
    on_device = draws_device((train_cfg or {}).get("draws", "cpu"), device).type != "cpu"
    for m in model.modules():
        if isinstance(m, Dropout):
            m.on_device = on_device
    if train_cfg:
        bs = int(train_cfg["batch_size"])
        stats.update(epochs=int(train_cfg["epochs"]), steps_per_epoch=task.n_train_batches(bs), batch_size=bs)
    model.head.setup(stats)


def make_optimizer(model: nn.Module, train_cfg: dict) -> torch.optim.Optimizer:
    return OPTIMIZERS.get(train_cfg.get("optimizer", "adam"))(model.parameters(), lr=train_cfg["lr"],
                                                              **train_cfg.get("optimizer_params", {}))


CHECK_EVERY = 100  # steps between reads of a GPU run's loss sum (each read is a host synchronisation)


def check_finite(total: torch.Tensor, out_dir: Path, epoch: int, step: int, every: int, lr: float) -> None:
    """Raise TrainingDiverged when the epoch's running loss sum is not finite (a loss became NaN/inf at or
    before batch step + 1; on a GPU within the `every` batches since the last read)."""
    if not torch.isfinite(total):
        at = f"step {step + 1}" if every == 1 else f"one of the {every} steps up to {step + 1}"
        raise TrainingDiverged(f"{out_dir}: training loss became non-finite ({total.item()}) at epoch {epoch + 1}, "
                               f"{at}; lower train.lr (now {lr:g}) or check the input features for NaN/inf")


def train_step(model: Model, opt: torch.optim.Optimizer, x, y, idx, loss_gen: torch.Generator, step: int,
               grad_clip: float | None = None) -> torch.Tensor:
    """One update (loss, backward, optional global-norm clipping, optimizer step, the head's
    after-step hook); the loss is returned unread, for the caller to check (`fit` does it without a host
    synchronisation per step on a GPU: the model a non-finite loss spoils is never saved)."""
    loss = model.loss(x, y, idx, loss_gen)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        clip_grad_norm(model.parameters(), float(grad_clip))
    optimizer_step(opt)
    model.head.after_step(step, opt)
    return loss


def make_schedule(train_cfg: dict):
    name = train_cfg.get("schedule", "constant")
    return SCHEDULES.get(name)(train_cfg["lr"], **train_cfg.get(name, {}))
