"""Matplotlib set-up shared by every figure: Agg backend, one style file, byte-stable saving.

Matplotlib is imported, switched to Agg and styled when the first figure is made, never when
xcbench is imported: importing the package leaves a user's backend and rcParams alone.
"""

from __future__ import annotations

from pathlib import Path

from xcbench.io import atomic_path

STYLE = Path(__file__).with_name("paper.mplstyle")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(ncols: int, nrows: int = 1, width_per_panel: float = 3.2, height: float = 2.5):
    plt = _pyplot()
    plt.style.use(["tableau-colorblind10", str(STYLE)])
    return plt.subplots(nrows, ncols, figsize=(width_per_panel * ncols, height * nrows), squeeze=False)


def save(fig, out_stem: str | Path) -> list[Path]:
    """Write <stem>.png and <stem>.pdf atomically, without timestamps (byte-stable reruns)."""
    paths = []
    for ext, meta in (("png", {"Software": None}), ("pdf", {"CreationDate": None, "Creator": None, "Producer": None})):
        path = Path(f"{out_stem}.{ext}")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, metadata=meta)
        paths.append(path)
    _pyplot().close(fig)
    return paths
