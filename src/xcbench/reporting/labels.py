"""Display names. One rule: a run (a method of an experiment) is shown by its `label:` in the
experiment file that defines it, else by its key (`method_label`); datasets and metric keys by the
tables below (`pretty`), else by their key. Registry keys have no display names of their own."""

from __future__ import annotations

DATASETS = {
    "bibtex": "Bibtex",
    "delicious": "Delicious",
    "synthetic-xmc-tiny": "Synthetic-XMC (tiny)",
    "synthetic-xmc-10k": "Synthetic-XMC-10K",
    "synthetic-faces-tiny": "Synthetic faces (tiny)",
    "synthetic-faces-40k": "Synthetic faces 40K",
    "movielens-100k": "MovieLens-100K",
    "movielens-10m": "MovieLens-10M",
    "gowalla": "Gowalla",
    "amazon-books": "Amazon-books",
    "movielens-10m-implicit": "MovieLens-10M (implicit, no time)",
    "gowalla-lightgcn": "Gowalla (LightGCN split, no time)",
    "amazon-book-kgat": "Amazon-book (KGAT split, no time)",
    "seqrec-lastfm": "LastFM",
    "seqrec-beauty": "Amazon Beauty",
    "seqrec-sports": "Amazon Sports",
    "seqrec-video": "Amazon Video Games",
    "synthetic-seq-tiny": "Synthetic sequences (tiny)",
    "synthetic-faces-360k": "Synthetic faces 360K",
    "synthetic-faces-10k": "Synthetic faces 10K",
    "synthetic-faces-87k": "Synthetic faces 87K",
    "synthetic-faces-750k": "Synthetic faces 750K",
    "ms-celeb-1m": "MS-Celeb-1M (IJB-A / MegaFace)",
    "ms-celeb-1m+mf2": "MS-Celeb-1M + MF2 (750K)",
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
    "final.inbatch_mass": "in-batch share of wrong-class mass",
    "final.train_loss_nu_gap_max": "largest nu lag (last epoch)",
    "val_ppl": "validation perplexity",
    "verif_tpr": "TPR@FPR=1e-3",
    "ident_top1": "identification top-1",
    "ppl": "perplexity",
    "acc": "next-word top-1",
}


def pretty(key: str, table: dict[str, str] | None = None) -> str:
    for t in ([table] if table else [DATASETS, METRICS]):
        if key in t:
            return t[key]
    return key


def method_label(exp: dict, method: str) -> str:
    """A run's display name: its `label:` in the experiment file, else its key."""
    return (exp["methods"].get(method) or {}).get("label") or method


def caption_name(exp: dict, method: str) -> str:
    """A run's name in a caption's list: its label, or its key where other methods share the label (MIDX Table
    7's `Full` of SASRec and of GRU4Rec, told apart by their table's column groups but not in a sentence)."""
    label = method_label(exp, method)
    return method if sum(method_label(exp, m) == label for m in exp["methods"]) > 1 else label
