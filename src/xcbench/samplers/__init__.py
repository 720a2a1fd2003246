"""Samplers (SAMPLERS registry) for sampled softmax; interface in samplers/base.py."""

from xcbench.samplers.base import Sampler  # noqa: F401
from xcbench.registry import import_submodules

import_submodules(__name__)  # every module in this folder registers its entries
