"""Report writing shared by every experiment: number formats, Markdown and plain-text
tables, CSV, and the two steps every plot shares.

Number formats (each experiment's tables have used one of these since they were
written; the names say what a reader sees):

* :func:`sig`: 4 significant digits (``nan`` for NaN);
* :func:`pm`: a mean and its 95% half-width, 4 and 2 significant digits
  (``-67.34 ± 0.76``; the half-width left out when NaN);
* :func:`pm_fixed`: the same with a fixed number of decimals (``-67.34 ± 0.76``);
* :func:`times`: a ratio (``15.00x``, ``inf``, ``n/a``);
* :func:`pct`: a signed share in percent (``+8.1%``, ``n/a``).

Plots: :func:`pyplot` gives matplotlib's pyplot on the non-interactive Agg backend, or
None on a core install without matplotlib (the experiment then writes its tables only);
:func:`save_figure` writes a PNG and closes the figure.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def sig(x: float) -> str:
    """``x`` to 4 significant digits; ``nan`` for NaN."""
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.4g}"


def pm(m: float, h: float) -> str:
    """``m ± h`` with 4 and 2 significant digits; ``m`` alone when ``h`` is NaN."""
    if math.isnan(m):
        return "nan"
    return f"{m:.4g} ± {h:.2g}" if not math.isnan(h) else f"{m:.4g}"


def pm_fixed(m: float, h: float, digits: int = 2) -> str:
    """``m ± h`` with ``digits`` decimals; ``m`` alone when ``h`` is not finite."""
    return f"{m:.{digits}f} ± {h:.{digits}f}" if math.isfinite(h) else f"{m:.{digits}f}"


def times(x: float | None) -> str:
    """A ratio: ``15.00x``; ``inf``; ``n/a`` for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "inf"
    return f"{x:.2f}x"


def pct(x: float) -> str:
    """A share in percent with its sign: ``+8.1%``; ``n/a`` when not finite."""
    return "n/a" if not math.isfinite(x) else f"{100 * x:+.1f}%"


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table's lines: the header, the rule, one line per row (cells as given,
    formatted by the caller)."""
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table with aligned columns, the first row as header, ruled below."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_csv(
    path: str | os.PathLike[str], fields: Sequence[str], rows: Iterable[dict[str, Any]]
) -> Path:
    """Write ``rows`` (mappings) as CSV with the columns ``fields``; return the path."""
    path = Path(path)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(rows)
    return path


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # core install: tables only
        return None
    return plt


def save_figure(fig: Any, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG at ``path`` and close it; return the path."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return Path(path)
