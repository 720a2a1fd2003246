"""Output layers (HEADS registry): one class per method, one interface (heads/base.py)."""

from xcbench.heads import full_softmax, minmin, ova, sampled_softmax, sparse_ova  # noqa: F401  (registers)
from xcbench.heads.base import Head, LinearHead, multi_hot  # noqa: F401
