"""Pretty names for registry keys, datasets and metrics: the only place they live."""

from __future__ import annotations

METHODS = {
    "full_softmax": "Full softmax",
    "sq_hinge": "OvA squared hinge",
    "bce": "OvA BCE",
}

DATASETS = {
    "bibtex": "Bibtex",
    "delicious": "Delicious",
    "synthetic-xmc-tiny": "Synthetic-XMC (tiny)",
    "synthetic-xmc-10k": "Synthetic-XMC-10K",
}

METRICS: dict[str, str] = {}


def pretty(key: str, table: dict[str, str] | None = None) -> str:
    for t in ([table] if table else [METHODS, DATASETS, METRICS]):
        if key in t:
            return t[key]
    return key
