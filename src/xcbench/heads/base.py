"""The output-layer interface every method implements (docs/design.md, Interfaces).

    loss(h, y, idx, gen) -> scalar    training loss of a batch; h (B, d) encoder output,
                                      y (B,) or (B, Lmax) padded with -1, idx (B,) example ids
                                      (per-example state such as SCENT's nu is indexed by idx)
    scores(h) -> (B, C)               full logits, used for evaluation only
    on_epoch_start(step, gen)         hook: rebuild indices, refresh samplers (explicit generator)
    after_step(step, optimizer)       hook after each optimizer step (step counts from 1): rewiring
    setup(stats)                      hook: training-set statistics (label counts, n) before fit
    epoch_metrics(h, y) -> dict       per-epoch numbers (history.csv, curves) on a fixed probe batch:
                                      h (P, d) its encoder output, y its labels
    report() -> dict                  head-specific numbers written to metrics.json["head"]
    class_embeddings() -> Parameter   the (C, d) class embedding table, if any (tying, proposals)
    loss_parts                        {name: value} of the last batch's losses (main, the proposal's aux),
                                      averaged per epoch into history as train_loss_<name>

Capabilities are class attributes (`multi_label`: accepts padded multi-label targets;
`resumes_mid_epoch`: keeps no state outside its parameters, buffers and the loop's generators, its
hooks' effects included, so a run may checkpoint and resume inside an epoch; `on_epoch_start` is then
not called again for the resumed epoch; `graph_safe`: its step neither synchronises with the host nor
reads the step count, so `train.cuda_graph` may capture it), so the training loop never branches on a
method name.
"""

from __future__ import annotations

import math

import torch
from torch import nn

BYTES_PER_ROW_COPIES = 3  # weights, gradient, momentum of each resident row (the class-selection paper's SGD)


def layer_mb(rows: float, d: int) -> float:
    """Device memory of a softmax layer: resident rows x d floats x (weights, gradient, momentum)."""
    return rows * d * 4 * BYTES_PER_ROW_COPIES / 2 ** 20


def class_weights(n_classes: int, d: int, gen: torch.Generator, std: float | None = None) -> nn.Parameter:
    """The (C, d) class-weight table drawn from N(0, std^2), std = 1/sqrt(d) unless given."""
    std = std if std is not None else 1.0 / math.sqrt(d)
    return nn.Parameter(torch.randn(n_classes, d, generator=gen) * std)                  # (C, d)


def check_param(head: str, name: str, value, lo: float, hi: float = math.inf, open_lo: bool = False) -> None:
    """A head parameter's range: lo <= value <= hi (lo < value with open_lo); raises naming head and key."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (value > lo if open_lo else value >= lo) \
        and value <= hi
    if not ok:
        rng = f"{'(' if open_lo else '['}{lo:g}, {hi:g}]" if hi < math.inf else f"{'>' if open_lo else '>='} {lo:g}"
        raise ValueError(f"{head}: params.{name} must be a number {rng}, got {value!r}")


class Head(nn.Module):
    multi_label = True
    resumes_mid_epoch = False
    graph_safe = False  # its training step may be captured as a CUDA graph (graphs.py): no host sync, no step count

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator) -> None:
        super().__init__()
        self.in_dim, self.n_classes = in_dim, n_classes
        self.loss_parts: dict[str, float] = {}
        self._gen: torch.Generator | None = None  # set by `prepare` (use outside the DAG's loop)

    def prepare(self, label_counts: torch.Tensor, n_train: int | None = None, epochs: int = 1,
                steps_per_epoch: int = 1, batch_size: int = 1, seed: int = 0) -> "Head":
        """Everything a head needs before its first `forward(h, y)` in your own loop, in one call:
        the training label counts (unigram proposals, NCE noise), the run's length (heads with
        schedules), a generator of its own, and the first index build (MIDX codebooks, trees). The
        DAG's loop (train.fit) calls `setup` and `on_epoch_start` itself; call `on_epoch_start(step,
        gen)` again at each epoch to rebuild an index from the current class embeddings."""
        device = next(iter(self.parameters()), label_counts).device
        counts = label_counts.to(device)
        self.setup({"label_counts": counts, "n_train": int(n_train if n_train is not None else counts.sum()),
                    "epochs": epochs, "steps_per_epoch": steps_per_epoch, "batch_size": batch_size})
        self._gen = torch.Generator().manual_seed(seed)  # on the CPU: seed.py
        self.on_epoch_start(0, self._gen)
        return self

    def forward(self, h: torch.Tensor, y: torch.Tensor | None = None, idx: torch.Tensor | None = None) -> torch.Tensor:
        """The training loss of a batch when `y` is given, else the full logits (B, C): a head is an
        nn.Module that DDP, torch.compile or Lightning can wrap. `idx` (B,) are example ids, needed
        by heads with per-example state (SCENT's duals). Needs `prepare` first."""
        if y is None:
            return self.scores(h)
        if self._gen is None:
            raise RuntimeError(f"{type(self).__name__}: call head.prepare(label_counts) once before training "
                               "with forward(h, y)")
        if idx is None:
            idx = torch.arange(h.shape[0], device=h.device)
        return self.loss(h, y, idx, self._gen)

    def loss(self, h: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def scores(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def on_epoch_start(self, step: int, gen: torch.Generator) -> None:
        pass

    def epoch_metrics(self, h: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        return {}

    def class_embeddings(self) -> nn.Parameter | None:
        return None

    tied = False  # model.tie sets True: the encoder's input table is class_embeddings() too

    def after_step(self, step: int, optimizer) -> None:
        pass

    def report(self) -> dict:
        """Head-specific numbers for metrics.json (e.g. the share of labels back-propagated)."""
        return {}

    def setup(self, stats: dict) -> None:
        pass


class LinearHead(Head):
    """A head with a dense class-embedding matrix W (C, d) and bias b (C,): o = h W^T + b."""

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, init_std: float | None = None) -> None:
        super().__init__(in_dim, n_classes, gen)
        self.W = class_weights(n_classes, in_dim, gen, init_std)                        # (C, d)
        self.b = nn.Parameter(torch.zeros(n_classes))                                   # (C,)

    def scores(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.W.T + self.b

    def class_embeddings(self) -> nn.Parameter:
        return self.W                                                    # (B, C)


def multi_hot(y: torch.Tensor, n_classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(B,) or (B, Lmax) padded labels -> (B, C) {0, 1} of `dtype` (float: a binary loss's targets; bool: a mask)."""
    y = y.unsqueeze(1) if y.dim() == 1 else y
    out = torch.zeros(y.shape[0], n_classes + 1, device=y.device, dtype=dtype)
    out.scatter_(1, torch.where(y >= 0, y, n_classes), 1)
    return out[:, :n_classes]
