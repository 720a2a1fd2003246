"""Shared by the MIDX Table 4 benchmarks (midx_protocols, midx_full_model, midx_transformer_lr,
midx_eval_state): one paper-scale Table 4 run on PTB built as `xcbench train` builds it
(runspec.method_config, tasks.make_task, model.build_model, seed 0, CPU), with the overrides a
benchmark varies, and a short training of it in a throwaway folder."""

from __future__ import annotations

import tempfile
from pathlib import Path

EXPERIMENT = "config/experiments/midx/table4.yaml"


def build(method: str, processed: str, params: dict | None = None, model: dict | None = None,
          eval_state: str | None = None) -> tuple:
    """(experiment, train config, model config, task, model) of Table 4's `method` at paper scale: `params`
    override the head's params, `model` is deep-merged into the model config, `eval_state` replaces the
    task's evaluation windows (zero | carry)."""
    import torch

    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import deep_merge, load_experiment, resolve_experiment
    from xcbench.model import build_model
    from xcbench.runspec import method_config
    from xcbench.tasks.base import make_task

    exp = resolve_experiment(load_experiment(EXPERIMENT), "paper")
    if eval_state is not None:
        exp["task"]["params"] = {**exp["task"]["params"], "eval_state": eval_state}
    spec, train_cfg, model_cfg = method_config(exp, "ptb", method)
    model_cfg = deep_merge(model_cfg, model or {})
    task = make_task(exp, dataset_entry("ptb", load_datasets()), processed, None, torch.device("cpu"), 0, dataset="ptb")
    net = build_model(model_cfg, spec["head"], {**spec.get("params", {}), **(params or {})}, task.in_dim,
                      task.n_classes, 0)
    return exp, train_cfg, model_cfg, task, net


def paper_train(train_cfg: dict, epochs: int, **over) -> dict:
    """Table 4's paper-scale optimiser settings (batch, optimiser, lr, clip) for `epochs` epochs at a
    constant learning rate: no plateau schedule, no best-epoch selection; `over` replaces settings."""
    base = {k: v for k, v in train_cfg.items() if k not in ("plateau", "select")}
    return {**base, **over, "epochs": epochs, "schedule": "constant"}


def short_fit(model, task, train_cfg: dict) -> tuple[list[dict], str]:
    """(history, note): `fit` in a throwaway folder; a diverged run gives no history and says so."""
    import torch

    from xcbench.step import TrainingDiverged
    from xcbench.train import fit

    with tempfile.TemporaryDirectory() as d:
        try:
            return fit(model, task, train_cfg, Path(d), 0, torch.device("cpu"))["history"], ""
        except TrainingDiverged as e:
            return [], f"diverged: {e}".replace(d, "<run>")
