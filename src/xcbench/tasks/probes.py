"""Measurements that train nothing (RF-softmax Tables 1 and 2), run as DAG jobs like training runs.

A probe is a task kind of its own (`trains = False`, no `train:` in its experiment): its job
(train.execute) calls `measure(spec, seed) -> {metric: value}` and writes the result folder (metrics.json,
history.csv, config.resolved.yaml) like a training run's, so tables render from cached results in
the same way.

`kernel_mse` (Table 1): `pairs` random pairs (h, c) of distinct rows of the dataset (L2-normalised),
target K = exp(tau h.c); the method's `head` names the estimator (ESTIMATORS registry):
  rff               e^tau phi(h).phi(c) with the RFF map of the Gaussian kernel at nu = tau (eq. 16-18)
  random_maclaurin  phi(h).phi(c) with Random Maclaurin features of exp(tau x.y)
  quadratic_fit     alpha (h.c)^2 + beta with (alpha, beta) fitted by least squares on the same pairs
                    (the table's "best alpha, beta"; its map has D = d^2 features)
MSE = mean over pairs of (estimate - K)^2.
`loss_timing` (Table 2): the dataset's rows are n class embeddings (d = their dimension); the method
is a `sampled_softmax` head; the index is built once (`build_s`, reported apart), then the loss of
`batch` random unit queries with m negatives is computed `repeats` times; `time_ms` is the median
wall time of one loss evaluation (sampling + logits + loss, no backward), after `warmup` calls,
with CUDA synchronised when on a GPU. A kernel tree (n D floats) larger than `max_tree_gib` is not built: its
row reports `skipped_tree_gib` instead of a time.
"""

from __future__ import annotations

import math
import statistics
import time

import torch

from xcbench.data.datasets import load_npz
from xcbench.registry import ESTIMATORS, HEADS, SAMPLERS, TASKS
from xcbench.seed import torch_generator
from xcbench.tasks.base import Param, Task


def _unit_rows(processed: str) -> torch.Tensor:
    arrays, _ = load_npz(processed)
    return torch.nn.functional.normalize(torch.from_numpy(arrays["train_x"]).double(), dim=1)  # (n, d)


def _pair_dot(phi, h: torch.Tensor, c: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """phi(h_i) . phi(c_i) for every pair, in chunks (phi of 256^2 features is large)."""
    return torch.cat([(phi(h[s:s + chunk]) * phi(c[s:s + chunk])).sum(1) for s in range(0, len(h), chunk)])


@ESTIMATORS.register("rff")
def rff(h, c, tau, D, seed=0):
    s = SAMPLERS.get("rff")(1, D=D, nu=tau, seed=seed)
    return math.exp(tau) * _pair_dot(s.phi, h, c)


@ESTIMATORS.register("random_maclaurin")
def random_maclaurin(h, c, tau, D, seed=0):
    return _pair_dot(SAMPLERS.get("random_maclaurin")(1, D=D, tau=tau, seed=seed).phi, h, c)


@ESTIMATORS.register("quadratic_fit")
def quadratic_fit(h, c, tau, D=None):
    x = (h * c).sum(1)
    A = torch.stack([x.square(), torch.ones_like(x)], 1)                                    # (P, 2)
    coef = torch.linalg.lstsq(A, torch.exp(tau * x).unsqueeze(1)).solution
    return (A @ coef).squeeze(1)


class Probe(Task):
    trains = False
    eval_splits: tuple[str, ...] = ()

    def __init__(self, params: dict, entry: dict, processed: str, features: str | None, device: torch.device,
                 seed: int) -> None:
        self.params, self.device = params, device
        self.X = _unit_rows(processed)
        self.n_classes, self.in_dim = self.X.shape
        self.info = {"n_vectors": self.n_classes, "dim": self.in_dim}

    def measure(self, spec: dict, seed: int) -> dict:
        raise NotImplementedError


@TASKS.register("kernel_mse")
class KernelMSE(Probe):
    PARAMS = {"tau": Param(float, 1.0, "the kernel exp(tau h.c)"),
              "pairs": Param(int, 1000, "random (h, c) pairs")}

    def measure(self, spec: dict, seed: int) -> dict:
        tau, P = self.params["tau"], self.params["pairs"]
        g = torch_generator(seed, "kernel-pairs")
        i = torch.randint(0, self.n_classes, (P,), generator=g)
        j = (i + torch.randint(1, self.n_classes, (P,), generator=g)) % self.n_classes      # j != i
        h, c = self.X[i], self.X[j]
        est = ESTIMATORS.get(spec["head"])(h, c, tau, **spec.get("params", {}))
        target = torch.exp(tau * (h * c).sum(1))
        return {"mse": (est - target).square().mean().item(), "target_mean": target.mean().item(),
                "D": float(spec.get("params", {}).get("D", self.in_dim ** 2)), "pairs": float(P), "tau": tau}


@TASKS.register("loss_timing")
class LossTiming(Probe):
    PARAMS = {"batch": Param(int, 10, "queries per loss"),
              "repeats": Param(int, 50, "timed calls (median reported)"),
              "warmup": Param(int, 3, "untimed calls first"),
              "max_tree_gib": Param(float, 8.0, "skip kernel trees larger than this")}

    def measure(self, spec: dict, seed: int) -> dict:
        params = dict(spec.get("params", {}))
        B, R = self.params["batch"], self.params["repeats"]
        n, d = self.n_classes, self.in_dim
        sampler_cls = SAMPLERS.get(params.get("sampler", "uniform"))
        gib = sampler_cls(1, **params.get("sampler_params", {})).index_gib(n, d)  # a kernel tree's node sums
        if gib > self.params["max_tree_gib"]:
            return {"skipped_tree_gib": gib}
        head = HEADS.get(spec["head"])(d, n, torch_generator(seed, "init"), **params).to(self.device)
        with torch.no_grad():
            head.E.copy_(self.X.float())
        head.setup({"label_counts": torch.ones(n, dtype=torch.long, device=self.device), "n_train": n})
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        t0 = time.perf_counter()
        head.on_epoch_start(0, torch_generator(seed, "index"))
        sync()
        build = time.perf_counter() - t0
        g = torch_generator(seed, "timing")
        h = torch.nn.functional.normalize(torch.randn(B, d, generator=g), dim=1).to(self.device)
        y = torch.randint(0, n, (B,), generator=g).to(self.device)
        times = []
        with torch.no_grad():
            for r in range(self.params["warmup"] + R):
                sync()
                t0 = time.perf_counter()
                head.loss(h, y, None, g)
                sync()
                times.append(time.perf_counter() - t0)
        times = times[-R:]
        return {"time_ms": 1000 * statistics.median(times), "time_ms_min": 1000 * min(times), "build_s": build,
                "n": float(n), "d": float(d)}


@TASKS.register("xmc_stats")
class XMCStats(Probe):
    """MIDX Table 8: an XC dataset's statistics as prepared here (classes, samples, BOW dimensionality)."""
    PARAMS: dict = {}

    def __init__(self, params: dict, entry: dict, processed: str, features: str | None, device: torch.device,
                 seed: int) -> None:
        self.params, self.device = params, device
        self.arrays, self.meta = load_npz(processed)
        self.n_classes, self.in_dim = int(self.meta["n_labels"]), int(self.meta["n_features"])
        self.info = {"n_labels": self.n_classes, "n_features": self.in_dim}

    def measure(self, spec: dict, seed: int) -> dict:
        Ytr, Yte = self.arrays["train_Y"], self.arrays["test_Y"]
        return {"classes": float(self.n_classes), "samples": float(Ytr.shape[0] + Yte.shape[0]),
                "train": float(Ytr.shape[0]), "test": float(Yte.shape[0]), "dimensionality": float(self.in_dim),
                "labels_per_sample": float(Ytr.nnz / max(1, Ytr.shape[0]))}
