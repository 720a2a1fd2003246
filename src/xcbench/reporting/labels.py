"""Pretty names for registry keys, datasets and metrics: the only place they live."""

from __future__ import annotations

METHODS = {
    "full_softmax": "Full softmax",
    "sq_hinge": "OvA squared hinge",
    "bce": "OvA BCE",
    "scent": "SCENT",
    "sox": "SOX",
    "sgd": "SGD (dual)",
    "bsgd": "BSGD",
    "sampled_softmax": "Sampled softmax",
    "dense": "Dense",
    "unstructured": "Unstructured-32",
    "uniform": "Uniform-32",
    "dense_int": "Dense + intermediate",
    "unstructured_int": "Unstructured-32 + intermediate",
    "uniform_int": "Uniform-32 + intermediate",
    "uniform_int_bce": "Uniform-32 + intermediate, BCE",
    "dense_int_bce": "Dense + intermediate, BCE",
}

DATASETS = {
    "bibtex": "Bibtex",
    "delicious": "Delicious",
    "synthetic-xmc-tiny": "Synthetic-XMC (tiny)",
    "synthetic-xmc-10k": "Synthetic-XMC-10K",
    "synthetic-faces-tiny": "Synthetic faces (tiny)",
    "synthetic-faces-5k": "Synthetic faces 5K",
    "synthetic-faces-360k": "Synthetic faces 360K",
    "ptb": "PTB",
    "wikitext-2": "WikiText-2",
    "synthetic-lm-tiny": "Synthetic LM (tiny)",
    "synthetic-usps": "Synthetic USPS (stand-in)",
    "synthetic-sphere-10k": "n = 10^4",
    "synthetic-sphere-500k": "n = 5x10^5",
    "synthetic-sphere-tiny": "Synthetic sphere (tiny)",
    "amazoncat-13k": "AmazonCat-13K",
    "delicious-200k": "Delicious-200K",
    "wikilshtc-325k": "WikiLSHTC-325K",
    "wiki10-31k": "Wiki10-31K",
    "amazon-670k": "Amazon-670K",
    "wikipedia-500k": "Wikipedia-500K",
}

METRICS: dict[str, str] = {
    "initial.val_ce": "val CE (start)",
    "final.train_ce": "train CE",
    "final.val_ce": "val CE",
    "final.val_top1": "val top-1",
    "final.train_top1": "train top-1",
    "final.val_ppl": "val perplexity",
    "val_ppl": "validation perplexity",
}


def pretty(key: str, table: dict[str, str] | None = None) -> str:
    for t in ([table] if table else [METHODS, DATASETS, METRICS]):
        if key in t:
            return t[key]
    return key
