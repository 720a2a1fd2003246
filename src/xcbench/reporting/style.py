"""Matplotlib set-up shared by every figure: Agg backend, one style file, byte-stable saving.

Matplotlib is imported, switched to Agg and styled when the first figure is made, never when
xcbench is imported: importing the package leaves a user's backend and rcParams alone.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from xcbench.io import atomic_path

STYLE = Path(__file__).with_name("paper.mplstyle")
LEGEND_INSIDE = 4  # lines a panel's own legend may hold before it moves outside the panels (6 covered the
# lines of a single-panel sweep: Figure 4 at 87K)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(ncols: int, nrows: int = 1, width_per_panel: float = 3.2, height: float = 2.5):
    plt = _pyplot()
    plt.style.use(["tableau-colorblind10", str(STYLE)])
    return plt.subplots(nrows, ncols, figsize=(width_per_panel * ncols, height * nrows), squeeze=False)


def palette() -> list[str]:
    """The colours of the style's cycle, in order (call after `figure`): to give a series the same colour
    in several lines of one panel."""
    return _pyplot().rcParams["axes.prop_cycle"].by_key()["color"]


def log_ticks(ax, axis: str = "x", at: list[float] | None = None) -> None:
    """Plain numbers on a log axis (0.5, 2, 300, not 5 x 10^-1): at the values `at` where given (a sweep's grid,
    K = 8, 16, ..., 128, which ticks at 1, 2 and 5 times the powers of ten would miss), else within about a decade
    ticks at 1, 2 and 5 times the powers of ten, each labelled once; over more, the powers of ten alone. Call
    after plotting."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

    which = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    which.set_major_formatter(plain)
    if at:
        which.set_major_locator(FixedLocator(sorted(at)))
        which.set_minor_locator(NullLocator())
        return
    if hi / max(lo, 1e-300) < 30:
        which.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        which.set_minor_formatter(plain)
    else:
        which.set_minor_formatter(NullFormatter())


def legend(fig, axes, lines: int) -> None:
    """A legend per panel for a few lines; for more than LEGEND_INSIDE, one legend right of the panels
    (the lines of every panel, each label once), where it covers no point."""
    if lines <= LEGEND_INSIDE:
        for ax in axes:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(frameon=False, fontsize=7)
        return
    seen: dict = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
    fig.legend(list(seen.values()), list(seen), frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))


def title(fig, text: str, fontsize: float = 9) -> None:
    """The figure's title, wrapped to the panels' width: unwrapped, a long title widened the saved image (tight
    bounding box) until the panels sat small in its middle and the y label ran into it. A character is taken as
    0.55 em."""
    chars = max(30, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))
    fig.suptitle(textwrap.fill(text, chars), fontsize=fontsize)


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
