"""Single-label (extreme) multi-class classification over fixed features.

Two sources of data:
- dense features with splits already made (synthetic-faces: `train_x/train_y`, `val_x/val_y`,
  `test_x/test_y`, with validation samples held out per identity by the generator);
- a multi-label XC dataset reduced to multi-class ("pick one label"): every row with at least one
  label becomes one example whose class is one of its positives drawn uniformly with
  `split_seed`; the validation rows are a `val_frac` share of the training rows (same seed).
Features are rescaled by one global factor so that the mean squared row norm on the training split
equals the dimension d (tf-idf+SVD rows have norm <= 1, face features ~sqrt(d/2): one learning
rate then suits both sources; directions and relative norms are unchanged; for rows generated per
batch (`lazy` synthetic faces) the mean is taken over a fixed sample of 65,536 training rows). Per epoch it reports
the full softmax cross-entropy (chunked over examples so a (n, K) matrix is
never held) and top-1 accuracy on a fixed training subset (`eval_train_size` examples drawn with
`split_seed`) and on the validation split (all of it, or a fixed `eval_val_size` subset, also used for
test); the curves start before the first update (epoch 0).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from xcbench.data.datasets import load_npz, split_rows
from xcbench.data.faces import FaceModel, LazyRows
from xcbench.data.prefetch import default_workers, read_ahead
from xcbench.registry import TASKS
from xcbench.seed import numpy_generator
from xcbench.tasks.base import Param, Task, load_features, shuffled_batches


def pick_one_label(X: torch.Tensor, Y, rows: np.ndarray, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with labels -> (features, one uniformly drawn positive label)."""
    Ys = Y[rows]
    counts = np.diff(Ys.indptr)
    keep = counts > 0
    pick = Ys.indptr[:-1][keep] + (rng.random(keep.sum()) * counts[keep]).astype(np.int64)
    return X[torch.from_numpy(rows[keep])], torch.from_numpy(Ys.indices[pick].astype(np.int64))


def _subset(n: int, k: int, seed: int, purpose: str) -> torch.Tensor:
    """A fixed sorted random subset of k of range(n) (all of it, in order, when k = n)."""
    if k >= n:
        return torch.arange(n)
    return torch.from_numpy(np.sort(numpy_generator(seed, purpose).permutation(n)[:k]))


@TASKS.register("multiclass")
class MultiClassTask(Task):
    PARAMS = {"val_frac": Param(float, 0.1, "validation share of the training rows (multi-label sources)"),
              "split_seed": Param(int, 0, "seed of the validation split and of the label picked per row"),
              "eval_train_size": Param(int, 10000, "size of the fixed training subset evaluated per epoch"),
              "eval_val_size": Param(int, 0, "size of the fixed validation (and test) subset evaluated; 0: all")}
    eval_splits = ("train", "val")
    eval_at_start = True
    probe_size = 1024   # >= the paper's batch: the SCENT head's in-batch mass is measured on batches of that size

    def __init__(self, params: dict, entry: dict, processed: str, features: str | None, device: torch.device,
                 seed: int) -> None:
        arrays, meta = load_npz(processed)
        self.device = device
        split_seed = params["split_seed"]
        if "lazy_spec" in arrays:  # synthetic faces generated per batch (data/faces.py)
            model = FaceModel(**json.loads(str(arrays["lazy_spec"])))
            self.x = {s: LazyRows(model, s) for s in ("train", "val", "test")}
            self.y = {s: torch.from_numpy(model.labels(s)) for s in ("train", "val", "test")}
            self.n_classes = model.n_ids
            how = "validation samples held out per class by the generator; rows generated per batch"
        elif "train_x" in arrays:
            self.x = {s: torch.from_numpy(arrays[f"{s}_x"]).float() for s in ("train", "val", "test")}
            self.y = {s: torch.from_numpy(arrays[f"{s}_y"]).long() for s in ("train", "val", "test")}
            self.n_classes = int(meta["n_classes"])
            how = "validation samples held out per class by the generator"
        else:
            feats = load_features(features, entry["name"])
            tr, va = split_rows(arrays["train_Y"].shape[0], params["val_frac"], split_seed,
                                f"{entry['name']}/val-split")
            self.x, self.y = {}, {}
            rng = numpy_generator(split_seed, f"{entry['name']}/pick-one-label")
            for s, X, Y, rows in (("train", feats["train"], arrays["train_Y"], tr),
                                  ("val", feats["train"], arrays["train_Y"], va),
                                  ("test", feats["test"], arrays["test_Y"], np.arange(arrays["test_Y"].shape[0]))):
                self.x[s], self.y[s] = pick_one_label(X, Y, rows, rng)
            self.n_classes = int(meta["n_labels"])
            how = "multi-label reduced to multi-class: one uniformly drawn positive label per row"
        n = len(self.y["train"])
        k = min(n, params["eval_train_size"])
        self.eval_rows = {"train": _subset(n, k, split_seed, "eval-train")}
        for s in ("val", "test"):
            nv = len(self.y[s])
            self.eval_rows[s] = _subset(nv, params["eval_val_size"] or nv, split_seed, f"eval-{s}")
        lazy = isinstance(self.x["train"], LazyRows)
        ref = self.x["train"][_subset(n, min(n, 65536), split_seed, "scale")] if lazy else self.x["train"]
        scale = (ref.shape[1] / ref.square().sum(1).mean().clamp(min=1e-12)).sqrt()
        self.x = {s: v * scale for s, v in self.x.items()}
        self.feature_scale = scale
        # the evaluated rows, held once (a lazy source would regenerate them every epoch)
        self.eval_xy = {s: (self.x[s][r], self.y[s][r]) for s, r in self.eval_rows.items()}
        self.in_dim = self.x["train"].shape[1]
        self.stats = {"label_counts": torch.bincount(self.y["train"], minlength=self.n_classes), "n_train": n}
        self.info = {"n_train": n, "n_val": len(self.y["val"]), "n_test": len(self.y["test"]),
                     "n_classes": self.n_classes, "in_dim": self.in_dim, "split_seed": split_seed,
                     "eval_train_size": k, "eval_val_size": len(self.eval_rows["val"]),
                     "eval_test_size": len(self.eval_rows["test"]), "split": how}

    def n_train_batches(self, batch_size: int) -> int:
        return len(self.y["train"]) // batch_size

    def probe_batch(self):
        """The first `probe_size` rows of the evaluated training subset: random examples (the training
        split is ordered by class, so its first rows would be a few classes repeated)."""
        x, y = self.eval_xy["train"]
        return x[:self.probe_size].to(self.device), y[:self.probe_size].to(self.device)

    def train_batches(self, batch_size, gen, start=0):
        # drop_last: the in-batch estimators average over the B - 1 other examples
        x, y = self.x["train"], self.y["train"]
        batches = shuffled_batches(len(y), batch_size, gen, drop_last=True, start=start)
        w = default_workers(self.device.type) if self.read_ahead is None else self.read_ahead
        w = w if isinstance(x, LazyRows) else 0                   # lazy rows: generated ahead in w threads
        for b, xb in read_ahead(lambda b: (b, x[b]), batches, w):
            yield xb.to(self.device), y[b].to(self.device), b.to(self.device)

    @torch.no_grad()
    def evaluate(self, model, split):
        x, y = self.eval_xy[split]
        bs = max(1, (1 << 24) // self.n_classes)
        ce = correct = 0.0
        for s in range(0, len(y), bs):
            o = model.scores(x[s:s + bs].to(self.device)).double()                              # (b, K)
            yb = y[s:s + bs].to(self.device)
            ce += (torch.logsumexp(o, 1) - o.gather(1, yb.unsqueeze(1)).squeeze(1)).sum().item()
            correct += (o.argmax(1) == yb).sum().item()
        return {"ce": ce / len(y), "top1": correct / len(y)}
