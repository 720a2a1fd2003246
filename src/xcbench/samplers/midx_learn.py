"""MIDX with learnable codebooks (MIDX paper, section 6.2.3, learnable codebooks).

`midx_learn_pq`, `midx_learn_rq`: the codewords U (K, d1), V (K, d2) train with the model, one
step of their own Adam (lr `codeword_lr`, betas 0.9 / 0.999) on the auxiliary loss below at every training
step (`fit_step`, samplers/base.py). They are buffers, not model parameters: the model's optimizer,
schedule and gradient clipping are the language model's (Table 4's SGD lr 20 with a global norm clip
of 0.25 would give the codewords lr 20 and let their gradient take the clip's budget). Adam's
moments are buffers too, so a resumed run continues the same updates. The proposal is MIDX's
(Theorem 2, samplers/midx.py) with the current codewords, so its log q stays exact after every update. Codewords
start from k-means at the first index build; every
later epoch start only re-assigns the classes to their nearest learned codewords (no k-means), and
every step re-assigns the chunk's classes and rebuilds the cells (O(n) counting), so a class's
cell never lags the codewords by more than n / chunk steps (stale cells with moved codewords made
the proposal far worse than k-means': KL 7.8 vs 0.56 on the tiny LM before this).

Auxiliary loss of one step, on a chunk S of classes (S = `chunk` classes, cycling through all n
in a fixed order, so a step costs O((|S| + B') K d), never O(n d)) and B' <= `queries` of the
batch's queries h (all detached: only the codewords learn from it):
  reconstruction  R = mean_{i in S} || c_i - c~_i ||^2,    c~_i = [u_{a_i}; v_{b_i}] (pq),
                                                            u_{a_i} + v_{b_i} (rq, v on the residual)
  KL              KL = mean_h sum_{i in S} p_i (log p_i - log p~_i),
                  p = softmax_{i in S}(tau h.c_i),  p~ = softmax_{i in S}(tau h.c~_i)
  aux = R + kl_weight KL.
**Choice** (the paper leaves the assignment open): hard nearest-codeword assignments a_i, b_i of
the chunk, recomputed at every step, so the gradient moves each class's own codewords (online
k-means for R); a soft assignment softmax_k(c_i.u_k) lets a long codeword absorb every class.
"""

from __future__ import annotations

import torch

from xcbench.registry import SAMPLERS
from xcbench.samplers.midx import MIDX, ProductQuantized, ResidualQuantized

BETAS, EPS = (0.9, 0.999), 1e-8
MOMENTS = ("mU", "vU", "mV", "vV")  # Adam's first and second moments of U and V


class Learnable(MIDX):
    shaped = ("U", "V", *MOMENTS)

    def __init__(self, n_classes: int, K: int = 32, tau: float = 1.0, max_iter: int = 100, chunk: int = 2048,
                 queries: int = 256, kl_weight: float = 1.0, codeword_lr: float = 1e-3, draw: str = "cells") -> None:
        super().__init__(n_classes, K, tau, max_iter, draw=draw)
        self.chunk, self.queries, self.kl_weight, self.lr = min(chunk, n_classes), queries, kl_weight, codeword_lr
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))  # aux steps taken: chunk offset, Adam's t
        for k in MOMENTS:
            self.register_buffer(k, torch.zeros(0))

    def quantize(self, c, gen):
        if self.U.numel() == 0:  # first build: k-means initialises the codewords
            U, self.a, V, self.b = self.fit_codebooks(c, gen)
            self.U, self.V = U.clone(), V.clone()
            self.mU, self.vU, self.mV, self.vV = (torch.zeros_like(w) for w in (U, U, V, V))
        else:
            self.a, self.b = self.assign(c, self.U, self.V)

    def fit_step(self, h, class_emb):
        if self.U.numel() == 0:
            return None
        with torch.enable_grad():
            self.U.requires_grad_(True), self.V.requires_grad_(True)
            loss = self.aux_loss(h, class_emb)
            gU, gV = torch.autograd.grad(loss, [self.U, self.V])
        with torch.no_grad():  # Adam (Kingma & Ba 2015), bias-corrected, on the buffers in place
            t = float(self.steps)
            for w, m, v, g in ((self.U, self.mU, self.vU, gU), (self.V, self.mV, self.vV, gV)):
                m.mul_(BETAS[0]).add_(g, alpha=1 - BETAS[0])
                v.mul_(BETAS[1]).addcmul_(g, g, value=1 - BETAS[1])
                w.sub_(self.lr * (m / (1 - BETAS[0] ** t)) / ((v / (1 - BETAS[1] ** t)).sqrt() + EPS))
        return loss.item()

    def aux_loss(self, h, class_emb):
        """The auxiliary loss R + kl_weight KL of the next chunk (module docstring); advances the chunk."""
        n = self.n_classes
        S = (self.steps * self.chunk + torch.arange(self.chunk, device=class_emb.device)) % n      # (S,)
        self.steps += 1
        c = class_emb.detach()[S].to(self.U.dtype)                                                # (S, d)
        a, b = self.assign(c, self.U, self.V)
        self.a[S], self.b[S] = a, b  # the index follows the moving codewords (all n within n / chunk steps)
        self.build_cells()
        ct = self.quantized(a, b)                                                                 # (S, d) differentiable
        recon = (c - ct).square().sum(1).mean()
        hq = h.detach()[: self.queries].to(c.dtype)                                               # (B', d)
        logp = torch.log_softmax(self.tau * hq @ c.T, 1)                                          # (B', S)
        logpt = torch.log_softmax(self.tau * hq @ ct.T, 1)
        kl = (logp.exp() * (logp - logpt)).sum(1).mean()
        return recon + self.kl_weight * kl


@SAMPLERS.register("midx_learn_pq")
class MIDXLearnProduct(ProductQuantized, Learnable):
    pass


@SAMPLERS.register("midx_learn_rq")
class MIDXLearnResidual(ResidualQuantized, Learnable):
    pass
