"""What benchmarks/selector_bench.py measures on, and how it times: the class embeddings (a stated cluster
mixture, or a trained run's), the device, and the median of repeated calls.

Mixture (Zhang et al. 2018 evaluate on trained face classifiers, whose rows of similar identities cluster):
n/100 centres mu_k ~ N(0, I_d / d), w_c = mu_k(c) + 0.5 eps_c, eps_c ~ N(0, I_d / d).
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import time
from pathlib import Path

import torch

DEV = torch.device("cpu")  # selector_bench.main() sets it from --device


def sync() -> None:
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int) -> tuple[float, object]:
    out = fn()
    ts = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def has(module: str) -> bool:
    """Whether an optional library (faiss, annoy) is installed."""
    return importlib.util.find_spec(module) is not None


def mixture(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    mu = torch.randn(max(1, n // 100), d, generator=g) / math.sqrt(d)
    return mu[torch.randint(len(mu), (n,), generator=g)] + 0.5 * torch.randn(n, d, generator=g) / math.sqrt(d)


def mixture_problem(n: int, d: int, B: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W (n, d), h (B, d), y (B,)) on the CPU from seed 0: the mixture and B queries near their classes,
    h_i = w_{y_i} + 0.5 e_i, e_i ~ N(0, I_d / d), y_i uniform."""
    g = torch.Generator().manual_seed(0)
    W = mixture(n, d, g)
    y = torch.randint(n, (B,), generator=g)
    return W, W[y] + 0.5 * torch.randn(B, d, generator=g) / math.sqrt(d), y


def trained(run_dir: Path, experiment: str, dataset: str, processed: str, B: int) -> tuple:
    """(W, h, y, description) of a trained class-selection run: its class embeddings W (C, d) from
    checkpoint.pt and the features h = encoder(x) (B, d) of B training examples (seeded draw), labels y."""
    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.run import make_run
    from xcbench.tasks.base import task_of
    from xcbench.train import model_of

    ck = torch.load(run_dir / "checkpoint.pt", weights_only=True, map_location="cpu")
    exp = resolve_experiment(load_experiment(experiment), "paper")
    run = make_run(exp, dataset, run_dir.parent.name, 0)                                    # .../<dataset>/<method>/seed0
    task = task_of(run, dataset_entry(dataset, load_datasets()), processed, None, torch.device("cpu"))
    model = model_of(run, task)
    model.load_state_dict(ck["model"])
    x, y, _ = next(task.train_batches(B, torch.Generator().manual_seed(6)))
    with torch.no_grad():
        h = model.encode(x)[0]                                                                  # (B, d)
    W = model.head.W.detach().clone()                                                          # (C, d)
    var = torch.linalg.svdvals(W - W.mean(0)).square().cumsum(0)
    spread = ", ".join(f"{k}: {var[k - 1] / var[-1]:.2f}" for k in (8, 32, 128) if k <= len(var))
    about = (f"Class embeddings W of a trained run ({dataset}, method {run_dir.parent.name}, checkpoint after "
             f"{ck['epoch']} epochs + {ck.get('step', 0)} batches; C = {len(W):,}, d = {h.shape[1]}; mean row norm "
             f"{W.norm(dim=1).mean():.2f}, norm of the mean row {W.mean(0).norm():.2f}; share of the centred rows' "
             f"variance in the top k principal directions, {spread}); queries = the encoder's features of {B} "
             f"training examples")
    print(about, flush=True)
    return W, h, y, about
