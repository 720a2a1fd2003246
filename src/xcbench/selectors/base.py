"""Active-class selection for selective softmax (interface; selectors come with their issue).

`select(h, y, k, gen)` returns the class ids whose logits enter the softmax for this batch:
(B, k) per example, or a (k,) union for the whole batch; the true labels are always included.
"""

from __future__ import annotations

import torch
from torch import nn


class Selector(nn.Module):
    needs_index = False

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.n_classes = n_classes

    def update(self, class_emb: torch.Tensor) -> None:
        """Rebuild the structure (hashing forest, k-means) from the class embeddings; default no-op."""

    def select(self, h: torch.Tensor, y: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError
