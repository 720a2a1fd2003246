"""Multi-label extreme classification over fixed features (XC repository datasets).

Data: features h (from `data/features/<ds>/<extractor><dim>.pt`) and CSR labels from the prepared
dataset. A validation split of `val_frac` of the training rows is held out with `split_seed` (model
selection and LR schedules never see the test split). Metrics: P@k, nDCG@k, PSP@k (Jain et al.
propensities with the dataset's A, B) and R@k for k in {1, 3, 5}, from full scores in batches, and `softmax_loss`, the
full softmax loss of those scores averaged over each row's positives (metrics.py; RF-softmax's Table 3 compares
it: "RF-softmax leads to 4% smaller full softmax loss"). A head trained on another loss (OvA, squared hinge) gets
the same number over its scores, which is no loss it minimised.
"""

from __future__ import annotations

import numpy as np
import torch

from xcbench import metrics as M
from xcbench.data.datasets import load_npz, pad_labels, split_rows
from xcbench.registry import TASKS
from xcbench.tasks.base import Param, Task, load_features, shuffled_batches

KS = (1, 3, 5)


@TASKS.register("xmc")
class XMCTask(Task):
    PARAMS = {"val_frac": Param(float, 0.1, "share of the training rows held out for validation"),
              "split_seed": Param(int, 0, "seed of the validation split")}

    def __init__(self, params: dict, entry: dict, processed: str, features: str, device: torch.device,
                 seed: int) -> None:
        arrays, meta = load_npz(processed)
        feats = load_features(features, entry["name"])
        self.device = device
        val_frac, split_seed = params["val_frac"], params["split_seed"]
        tr, va = split_rows(arrays["train_Y"].shape[0], val_frac, split_seed, f"{entry['name']}/val-split")
        Ytr, Yte = arrays["train_Y"], arrays["test_Y"]
        self.x = {"train": feats["train"][tr], "val": feats["train"][va], "test": feats["test"]}
        self.y = {"train": pad_labels(Ytr, tr), "val": pad_labels(Ytr, va), "test": pad_labels(Yte)}
        self.in_dim = self.x["train"].shape[1]
        self.n_classes = int(meta["n_labels"])
        counts = torch.from_numpy(np.bincount(Ytr[tr].indices, minlength=self.n_classes))
        psp = entry.get("psp", {"A": 0.55, "B": 1.5})
        self.inv_prop = M.jain_inverse_propensity(counts, len(tr), psp["A"], psp["B"])
        self.stats = {"label_counts": counts, "n_train": len(tr)}
        self.info = {"n_train": len(tr), "n_val": len(va), "n_test": int(Yte.shape[0]), "val_frac": val_frac,
                     "split_seed": split_seed, "n_classes": self.n_classes, "in_dim": self.in_dim,
                     "feature_meta": feats.get("meta", {})}

    def n_train_batches(self, batch_size: int) -> int:
        return -(-self.x["train"].shape[0] // batch_size)

    def train_batches(self, batch_size, gen, start=0):
        for b in shuffled_batches(self.x["train"].shape[0], batch_size, gen, start=start):
            yield self.x["train"][b].to(self.device), self.y["train"][b].to(self.device), b.to(self.device)

    @torch.no_grad()
    def evaluate(self, model, split, batch_size: int = 1024):
        x, y = self.x[split], self.y[split]
        tops, loss_sum, loss_rows = [], 0.0, 0
        for s in range(0, x.shape[0], batch_size):
            o = model.scores(x[s:s + batch_size].to(self.device))                         # (b, C)
            tops.append(o.topk(max(KS), 1).indices.cpu())
            a, r = M.softmax_loss_rows(o, y[s:s + batch_size].to(o.device))
            loss_sum, loss_rows = loss_sum + a, loss_rows + r
        top = torch.cat(tops)                                                             # (n, 5)
        out = {"softmax_loss": loss_sum / max(loss_rows, 1)}
        for k in KS:
            out[f"P@{k}"] = M.precision_at_k(top, y, k)
            out[f"nDCG@{k}"] = M.ndcg_at_k(top, y, k)
            out[f"PSP@{k}"] = M.psp_at_k(top, y, self.inv_prop, k)
            out[f"R@{k}"] = M.recall_at_k(top, y, k)
        return out
