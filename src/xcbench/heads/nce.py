"""Noise-contrastive estimation (Gutmann & Hyvarinen 2010; Mnih & Teh 2012), the NCE baseline of
Zhang et al. 2018 (Table 1).

Scores s_c(h) = w_c . h + b_c are trained as unnormalised log-probabilities. Each batch draws k noise
classes n_1..n_k i.i.d. from the noise distribution q (shared by the batch's examples), and
    loss_i = -log sigma(s_{y_i} - log(k q_{y_i})) - sum_j log sigma(-(s_{n_j} - log(k q_{n_j})))
(the logistic classification of data against k noise samples). q is uniform (`noise: uniform`, the
face identities are balanced) or the training label frequencies (`noise: unigram`, as language models
use it: Mnih & Teh 2012). The bias starts at 0 (`bias_init: zero`) or at b_c = log q_c
(`bias_init: log_noise`, Labeau & Allauzen 2018): NCE's optimum is s_c(h) = log p(c | h) with the
normaliser fixed at 1, and a class drawn seldom as noise (a rare word under unigram noise) is seldom
pushed down from where it starts, so from 0 it keeps a score far above its log-probability, which the
evaluation's softmax then reads. Class rows are read sparsely, so a step touches only the labels' and
the noise classes' rows. Evaluation uses the scores as logits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from xcbench.heads.base import Head, check_param, class_weights, layer_mb
from xcbench.registry import HEADS
from xcbench.samplers.simple import log_unigram
from xcbench.seed import multinomial


def nce_loss(s_t: torch.Tensor, s_n: torch.Tensor, log_q_t: torch.Tensor, log_q_n: torch.Tensor, k: int) -> torch.Tensor:
    """Per-example NCE loss (B,): s_t (B,) target scores, s_n (B, k) noise scores, their log q."""
    return -F.logsigmoid(s_t - log_q_t - math.log(k)) - F.logsigmoid(-(s_n - log_q_n - math.log(k))).sum(1)


@HEADS.register("nce")
class NCE(Head):
    multi_label = False

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, k: int = 100, noise: str = "uniform",
                 init_std: float | None = None, bias_init: str = "zero") -> None:
        super().__init__(in_dim, n_classes, gen)
        check_param("nce", "k", k, 1)
        if noise not in ("uniform", "unigram"):
            raise ValueError(f"nce: noise must be 'uniform' or 'unigram', got {noise!r}")
        if bias_init not in ("zero", "log_noise"):
            raise ValueError(f"nce: bias_init must be 'zero' or 'log_noise', got {bias_init!r}")
        self.W = class_weights(n_classes, in_dim, gen, init_std)                               # (C, d)
        self.b = nn.Parameter(torch.zeros(n_classes, 1))                                        # (C, 1)
        self.k, self.noise, self.bias_init = k, noise, bias_init
        self.register_buffer("log_q", torch.full((n_classes,), -math.log(n_classes)))

    def setup(self, stats):
        if self.noise == "unigram":
            self.log_q = log_unigram(stats["label_counts"]).float().to(self.log_q.device)
        if self.bias_init == "log_noise":  # before a checkpoint's weights are loaded over it (train.py)
            with torch.no_grad():
                self.b.copy_(self.log_q.unsqueeze(1))                                           # (C, 1)

    def class_embeddings(self):
        return self.W

    def scores(self, h):
        return h @ self.W.T + self.b[:, 0]

    def loss(self, h, y, idx, gen):
        n = multinomial(self.log_q.exp(), self.k, gen)                                          # (k,)
        emb = lambda ids, t: F.embedding(ids, t, sparse=True)  # noqa: E731  (rows read sparsely)
        s_t = (h * emb(y, self.W)).sum(1) + emb(y, self.b)[:, 0]                                # (B,)
        s_n = h @ emb(n, self.W).T + emb(n, self.b)[:, 0]                                       # (B, k): noise shared by the batch
        return nce_loss(s_t, s_n, self.log_q[y], self.log_q[n].unsqueeze(0), self.k).mean()

    def report(self):
        return {"softmax_layer_mb": layer_mb(self.k + 1, self.in_dim)}
