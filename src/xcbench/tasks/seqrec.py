"""Sequential recommendation: next-item prediction over the full item set (MIDX paper section 6.3).

Split (8:1:1 as the paper states, read per user in time order): of a user's time-ordered sequence
of L items, the last round(L/10) (at least 1) are test targets, the round(L/10) (at least 1) before
them validation targets, the rest training (a user with L < 3 only trains).
Training: each user's training items are cut, from the end, into windows of up to `max_len` + 1
items; x = window[:-1] and y = window[1:], left-padded to `max_len` with -1: a query at every
position predicts the next item, and padding is never a target (Model drops rows with y = -1).
Evaluation: every held-out interaction is one query: the `max_len` items before it (training,
then earlier held-out items, in time order) predict it; all n items are scored, the items the user
interacted with before the target are excluded from the ranking (the target itself is kept, also
when it repeats an earlier item). NDCG@k and Recall@k (one relevant item: 1/log2(rank + 2) and
1[rank < k]) for k in `cutoffs`, averaged over queries.
"""

from __future__ import annotations

import numpy as np
import torch

from xcbench import metrics as M
from xcbench.data.datasets import load_npz
from xcbench.registry import TASKS
from xcbench.tasks.base import Param, Task, shuffled_batches


def split_points(L: int) -> tuple[int, int]:
    """(end of training, end of validation) of a time-ordered sequence of L items (8:1:1)."""
    if L < 3:
        return L, L
    n_ho = max(1, int(round(L / 10)))
    return L - 2 * n_ho, L - n_ho


def window_ends(tr: int, T: int) -> range:
    """The ends of the training windows of a sequence whose first tr items train: windows of <= T + 1 items cut
    from the end, seq[max(0, end - T - 1):end] for each end."""
    return range(tr, 1, -T)


def left_pad(seqs: list[np.ndarray], T: int) -> np.ndarray:
    out = np.full((len(seqs), T), -1, np.int64)
    for i, s in enumerate(seqs):
        s = s[-T:]
        if len(s):
            out[i, T - len(s):] = s
    return out


@TASKS.register("seqrec")
class SeqRecTask(Task):
    PARAMS = {"max_len": Param(int, 20, "items in a query's input window"),
              "cutoffs": Param(list, [10, 50], "k of NDCG@k and Recall@k"),
              "eval_users": Param(int, 0, "evaluate the held-out items of this many users (fixed subset); 0: all")}
    eval_splits = ("val",)
    eval_at_start = True
    pads_targets = True  # windows are left-padded with -1
    probe_size = 64

    def __init__(self, params: dict, entry: dict, processed: str, features: str | None, device: torch.device,
                 seed: int) -> None:
        arrays, meta = load_npz(processed)
        if "seq_items" not in arrays:
            raise ValueError(f"{processed}: task seqrec needs time-ordered sequences (formats interactions, "
                             f"seq_lines); dataset {entry['name']!r} has format {entry.get('format')!r}")
        self.device, self.T, self.cutoffs = device, params["max_len"], [int(k) for k in params["cutoffs"]]
        ptr, items = arrays["seq_indptr"], arrays["seq_items"]
        self.seqs = [items[ptr[u]:ptr[u + 1]] for u in range(len(ptr) - 1)]
        self.n_classes = int(meta["n_classes"])
        self.in_dim = self.n_classes
        windows, queries = [], {"val": [], "test": []}
        for u, s in enumerate(self.seqs):
            tr, va = split_points(len(s))
            for end in window_ends(tr, self.T):
                windows.append(s[max(0, end - self.T - 1):end])
            for split, (a, b) in (("val", (tr, va)), ("test", (va, len(s)))):
                queries[split] += [(u, p) for p in range(a, b)]
        w = left_pad(windows, self.T + 1)                                                        # (W, T + 1)
        self.x_train = torch.from_numpy(w[:, :-1])
        self.y_train = torch.from_numpy(np.where(w[:, :-1] >= 0, w[:, 1:], -1))                   # pad never a target
        if params["eval_users"]:
            rng = np.random.default_rng(0)
            keep = set(rng.permutation(len(self.seqs))[:params["eval_users"]].tolist())
            queries = {k: [q for q in v if q[0] in keep] for k, v in queries.items()}
        self.queries = {k: np.asarray(v, np.int64).reshape(-1, 2) for k, v in queries.items()}   # (Q, 2): user, position
        counts = np.bincount(self.y_train[self.y_train >= 0].numpy(), minlength=self.n_classes)
        self.stats = {"label_counts": torch.from_numpy(counts), "n_train": len(w)}
        n_inter = int(sum(len(s) for s in self.seqs))
        self.info = {"n_users": len(self.seqs), "n_items": self.n_classes, "n_interactions": n_inter,
                     "density": n_inter / max(1, len(self.seqs) * self.n_classes), "n_windows": len(w),
                     "n_val_queries": len(self.queries["val"]), "n_test_queries": len(self.queries["test"]),
                     "max_len": self.T, "split": "per user in time order 8:1:1",
                     "time_ordered": bool(meta.get("time_ordered", True))}

    def n_train_batches(self, batch_size: int) -> int:
        return -(-len(self.x_train) // batch_size)

    def train_batches(self, batch_size, gen, start=0):
        for b in shuffled_batches(len(self.x_train), batch_size, gen, start=start):
            yield self.x_train[b].to(self.device), self.y_train[b].reshape(-1).to(self.device), b.to(self.device)

    def probe_batch(self):
        x, y = self.x_train[:self.probe_size], self.y_train[:self.probe_size].reshape(-1)
        keep = y >= 0
        return x.to(self.device), y[keep].to(self.device)

    def query_batch(self, q: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x (b, T) input windows, y (b,) targets, history mask (b, n): items seen before the target)."""
        hist = [self.seqs[u][:p] for u, p in q]
        x = torch.from_numpy(left_pad(hist, self.T))
        y = torch.from_numpy(np.asarray([self.seqs[u][p] for u, p in q], np.int64))
        rows = np.repeat(np.arange(len(q)), [len(h) for h in hist])
        mask = torch.zeros(len(q), self.n_classes, dtype=torch.bool)
        mask[torch.from_numpy(rows), torch.from_numpy(np.concatenate(hist) if hist else np.zeros(0, np.int64))] = True
        mask[torch.arange(len(q)), y] = False
        return x, y, mask

    @torch.no_grad()
    def evaluate(self, model, split):
        q_all = self.queries[split]
        K = max(self.cutoffs)
        top = []
        ys = []
        bs = max(1, min(1024, (1 << 24) // max(1, self.n_classes)))
        for s in range(0, len(q_all), bs):
            x, y, mask = self.query_batch(q_all[s:s + bs])
            h = model.embed(x.to(self.device))                                                  # (b, d)
            o = model.head.scores(h).masked_fill(mask.to(self.device), float("-inf"))           # (b, n)
            top.append(o.topk(min(K, self.n_classes), 1).indices.cpu())
            ys.append(y)
        if not top:
            return {f"{m}@{k}": 0.0 for k in self.cutoffs for m in ("ndcg", "recall")}
        topk, y = torch.cat(top), torch.cat(ys)
        return {f"{m}@{k}": f(topk, y, k) for k in self.cutoffs
                for m, f in (("ndcg", M.ndcg_at_k), ("recall", M.recall_at_k))}


@TASKS.register("seqrec_stats")
class SeqRecStats(SeqRecTask):
    """MIDX Table 6: a dataset's statistics as processed here (a measurement: nothing is trained)."""
    trains = False
    eval_splits: tuple[str, ...] = ()

    def measure(self, spec: dict, seed: int) -> dict:
        lengths = [len(s) for s in self.seqs]
        return {"users": float(self.info["n_users"]), "items": float(self.n_classes),
                "interactions": float(self.info["n_interactions"]), "density": self.info["density"],
                "mean_length": float(np.mean(lengths)) if lengths else 0.0,
                "val_queries": float(len(self.queries["val"])), "test_queries": float(len(self.queries["test"])),
                "time_ordered": float(self.info["time_ordered"])}
