"""Fixed feature extractors (FEATURES) and trainable encoders (ENCODERS)."""

from xcbench.features import encoders, lstm, tfidf_svd  # noqa: F401  (registers)
