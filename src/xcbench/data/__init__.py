"""Data layer: fetch (mirrors, URLs, sha256), readers of raw formats, synthetic generators, prepare."""

from xcbench.data import datasets, synthetic  # noqa: F401  (registers readers and generators)
