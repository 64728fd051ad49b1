"""Frames of the serving envs (``render_mode="rgb_array"`` and ``"human"``), drawn with NumPy.

One layout serves the three envs (see ``docs/render.md`` for the legend):

* a header line of figures (clock, queue length, drops, ...);
* the **queue** panel: one bar per waiting request, oldest on the left, its height the
  request's wait over the SLA, coloured from green (just arrived) through yellow to orange
  (at the SLA) and red past its deadline; a white line marks the SLA; under it a gauge of
  the queue's length over its capacity;
* the **service** panel, env-specific: the last batch (``DynamicBatching-v0``), the groups
  at their node positions (``NodeBatching-v0``), the running requests and the KV cache
  (``LLMBatching-v0``);
* the **timeline** of the last batches (group completions, LLM iterations): their size
  over the maximum, and their latency over the SLA (the white line).

Drawing is slice assignments and byte masks (two ``uint8`` ufunc passes a bar area) on a
cached background (static labels and frames are drawn once per env), then one copy: a
frame costs about 0.4 ms on a slow, shared 2-core machine, 10 to 15 steps' worth
(``docs/render.md``; ``batch-env bench`` measures it). Nothing here runs unless a frame is
asked for. Text uses a built-in 3x5 bitmap font (digits, capitals and a few signs).

``"human"`` shows frames in a window (pygame if installed, else an interactive matplotlib
backend, both imported on first use) when a display exists; otherwise it prints the
env's ANSI text and warns once.
"""

from __future__ import annotations

import os
import struct
import sys
import warnings
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

#: Frame size (height, width): multiples of 16, so video encoders need no resizing.
HEIGHT, WIDTH = 240, 400


def _color(r: int, g: int, b: int) -> np.ndarray:
    out = np.array([r, g, b], dtype=np.uint8)
    out.flags.writeable = False
    return out


# the palette (read-only uint8 RGB arrays: numpy assigns them without converting)
BACKGROUND = _color(24, 26, 32)
PANEL = _color(38, 41, 50)
GRID = _color(70, 74, 86)
TEXT = _color(220, 222, 228)
DIM = _color(140, 144, 156)
SLA_LINE = _color(245, 245, 245)
RED = _color(230, 50, 45)
ORANGE = _color(245, 140, 40)
BLUE = _color(70, 150, 235)
PURPLE = _color(170, 110, 230)
TEAL = _color(60, 190, 170)

# -- the bitmap font ------------------------------------------------------------------------
_FONT_ROWS = {
    "0": ("111", "101", "101", "101", "111"),
    "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"),
    "3": ("111", "001", "111", "001", "111"),
    "4": ("101", "101", "111", "001", "001"),
    "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"),
    "7": ("111", "001", "010", "010", "010"),
    "8": ("111", "101", "111", "101", "111"),
    "9": ("111", "101", "111", "001", "111"),
    "A": ("010", "101", "111", "101", "101"),
    "B": ("110", "101", "110", "101", "110"),
    "C": ("011", "100", "100", "100", "011"),
    "D": ("110", "101", "101", "101", "110"),
    "E": ("111", "100", "110", "100", "111"),
    "F": ("111", "100", "110", "100", "100"),
    "G": ("011", "100", "101", "101", "011"),
    "H": ("101", "101", "111", "101", "101"),
    "I": ("111", "010", "010", "010", "111"),
    "J": ("001", "001", "001", "101", "010"),
    "K": ("101", "101", "110", "101", "101"),
    "L": ("100", "100", "100", "100", "111"),
    "M": ("101", "111", "111", "101", "101"),
    "N": ("110", "101", "101", "101", "101"),
    "O": ("010", "101", "101", "101", "010"),
    "P": ("110", "101", "110", "100", "100"),
    "Q": ("010", "101", "101", "110", "011"),
    "R": ("110", "101", "110", "101", "101"),
    "S": ("011", "100", "010", "001", "110"),
    "T": ("111", "010", "010", "010", "010"),
    "U": ("101", "101", "101", "101", "111"),
    "V": ("101", "101", "101", "101", "010"),
    "W": ("101", "101", "111", "111", "101"),
    "X": ("101", "101", "010", "101", "101"),
    "Y": ("101", "101", "010", "010", "010"),
    "Z": ("111", "001", "010", "100", "111"),
    ".": ("000", "000", "000", "000", "010"),
    ":": ("000", "010", "000", "010", "000"),
    "/": ("001", "001", "010", "100", "100"),
    "+": ("000", "010", "111", "010", "000"),
    "-": ("000", "000", "111", "000", "000"),
    "=": ("000", "111", "000", "111", "000"),
    "%": ("101", "001", "010", "100", "101"),
    "(": ("010", "100", "100", "100", "010"),
    ")": ("010", "001", "001", "001", "010"),
    "<": ("001", "010", "100", "010", "001"),
    ">": ("100", "010", "001", "010", "100"),
    "@": ("010", "101", "111", "100", "011"),
    " ": ("000", "000", "000", "000", "000"),
}
#: glyph of every ASCII code, with one blank column after it: (128, 5, 4) booleans; codes
#: without a glyph (lower case is drawn as upper case) are blank
_GLYPHS = np.zeros((128, 5, 4), dtype=bool)
for _ch, _rows in _FONT_ROWS.items():
    _GLYPHS[ord(_ch), :, :3] = np.array([[c == "1" for c in r] for r in _rows])
    if _ch.isalpha():
        _GLYPHS[ord(_ch.lower())] = _GLYPHS[ord(_ch)]
del _ch, _rows


# -- colours -----------------------------------------------------------------------------------
def _ramp() -> np.ndarray:
    """64 colours from green (wait 0) through yellow (half the SLA) to orange (the SLA)."""
    t = np.linspace(0.0, 1.0, 64)[:, None]
    green, yellow, orange = (
        np.array([60, 200, 90]),
        np.array([235, 215, 60]),
        np.array([245, 140, 40]),
    )
    lo = green + (yellow - green) * np.clip(2 * t, 0, 1)
    return np.where(t < 0.5, lo, yellow + (orange - yellow) * np.clip(2 * t - 1, 0, 1)).astype(
        np.uint8
    )


#: the ramp's 64 colours, then red (index 64)
_RAMP = np.vstack([_ramp(), RED[None, :]])


def sla_colors(ratio: np.ndarray) -> np.ndarray:
    """Colours of times over an SLA: the green-yellow-orange ramp on [0, 1], red above 1
    (past the deadline; a ratio of exactly 1 meets it; NaN counts as 0).

    :param ratio: 1-D array of time / SLA.
    :returns: ``(len(ratio), 3)`` uint8 colours.
    """
    ratio = np.asarray(ratio, dtype=np.float64)
    idx = np.where(ratio > 1.0, 64.0, ratio * 63.0)
    np.fmax(idx, 0.0, out=idx)  # (NaN -> 0)
    np.minimum(idx, 64.0, out=idx)
    return _RAMP[idx.astype(np.intp)]


@lru_cache(maxsize=1024)
def _column_layout(n: int, width: int, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """For ``n`` bars of ``width`` pixels and ``gap`` pixels apart, byte by byte of a row
    (3 bytes a pixel): the bar each byte belongs to (``n`` for a gap) and the index of its
    colour byte in the bars' flattened ``(n, 3)`` colours."""
    xs = np.arange((n * (width + gap) - gap) * 3)
    px, channel = xs // 3, xs % 3
    bar, inside = px // (width + gap), px % (width + gap) < width
    return np.where(inside, bar, n), np.minimum(bar, n - 1) * 3 + channel


def _blend(region: np.ndarray, mask: np.ndarray, color_bytes: np.ndarray) -> None:
    """``region[mask] = color_bytes`` (broadcast along rows) without a masked copy.

    ``region`` is a 2-D uint8 view of image bytes, ``mask`` a bool array of its shape;
    branch-free (``region ^= (region ^ color) & -mask``), which NumPy runs many times
    faster than ``np.copyto(..., where=mask)`` on bar and glyph shapes.
    """
    x = np.bitwise_xor(region, color_bytes)
    x &= np.negative(mask.view(np.uint8))
    region ^= x


@lru_cache(maxsize=8)
def _glyph_bytes(scale: int) -> np.ndarray:
    """The font at ``scale``, byte by byte: ``(128, 5 * scale, 12 * scale)`` booleans."""
    return _GLYPHS.repeat(scale, axis=1).repeat(3 * scale, axis=2)


def _text_mask(s: str, scale: int) -> np.ndarray:
    """The byte mask of ``s`` in the bitmap font at ``scale``: ``(5 * scale, 12 * scale * len(s))``."""
    codes = np.frombuffer(s.encode("ascii", "replace"), dtype=np.uint8) & 127
    g = _glyph_bytes(scale)[codes]  # (len, rows, bytes)
    return g.transpose(1, 0, 2).reshape(g.shape[1], -1)


@lru_cache(maxsize=1024)
def _row_index(start: int, n: int, small: bool) -> np.ndarray:
    """Column vector ``start .. start + n - 1`` (uint8 when ``small``; read-only; cached)."""
    out = np.arange(start, start + n, dtype=np.uint8 if small else np.int32)[:, None]
    out.flags.writeable = False
    return out


def _rgb(color: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.asarray(color, dtype=np.uint8).reshape(3)


# -- the canvas --------------------------------------------------------------------------------
class Canvas:
    """An ``height x width x 3`` uint8 image drawn with NumPy slicing.

    Static content (panels, labels) is drawn once and frozen with :meth:`freeze`; each
    frame then starts as a copy of it (:meth:`begin`), so a returned frame is a new array
    that later frames do not overwrite (``RecordVideo`` keeps them in a list).
    Coordinates are pixels, ``x`` to the right, ``y`` down; rectangles are half-open
    ``[x0, x1) x [y0, y1)``; everything is clipped to the image.
    """

    def __init__(
        self,
        height: int = HEIGHT,
        width: int = WIDTH,
        background: Sequence[int] | np.ndarray = BACKGROUND,
    ) -> None:
        """:param height: rows.  :param width: columns.  :param background: RGB of the empty image."""
        if not (isinstance(height, int) and isinstance(width, int) and height >= 1 and width >= 1):
            raise ValueError(
                f"Canvas: height={height!r}, width={width!r} are invalid: expected ints >= 1"
            )
        self.height, self.width = height, width
        self._base = np.empty((height, width, 3), dtype=np.uint8)
        self._base[:] = _rgb(background)
        self._rows: dict[bytes, np.ndarray] = {}  # colour -> a row of the image's width in it
        self.image = self._base

    def freeze(self) -> None:
        """Make the current image the background of every later frame."""
        self._base = self.image.copy()
        self.image = self._base

    def begin(self) -> np.ndarray:
        """Start a frame: a fresh copy of the frozen background, which is returned."""
        self.image = self._base.copy()
        return self.image

    def _bytes(self, x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
        """The bytes of ``[x0, x1) x [y0, y1)`` (clipped) as a 2-D uint8 view."""
        x0, y0 = max(x0, 0), max(y0, 0)
        x1, y1 = min(max(x1, x0), self.width), min(max(y1, y0), self.height)
        return self.image.reshape(self.height, self.width * 3)[y0:y1, 3 * x0 : 3 * x1]

    def _row(self, color: Sequence[int] | np.ndarray) -> np.ndarray:
        """The bytes of a full image row in ``color`` (cached): slices of it fill byte
        rows with contiguous copies, many times faster than broadcasting an RGB triple."""
        key = bytes(_rgb(color))
        row = self._rows.get(key)
        if row is None:
            if len(self._rows) > 1024:
                self._rows.clear()
            row = self._rows[key] = np.tile(_rgb(color), self.width)
            row.flags.writeable = False
        return row

    def fill(self, x0: int, y0: int, x1: int, y1: int, color: Sequence[int] | np.ndarray) -> None:
        """Fill the rectangle ``[x0, x1) x [y0, y1)``."""
        region = self._bytes(x0, y0, x1, y1)
        region[...] = self._row(color)[: region.shape[1]]

    def outline(
        self, x0: int, y0: int, x1: int, y1: int, color: Sequence[int] | np.ndarray
    ) -> None:
        """Draw the one-pixel border of the rectangle ``[x0, x1) x [y0, y1)``."""
        self.fill(x0, y0, x1, y0 + 1, color)
        self.fill(x0, y1 - 1, x1, y1, color)
        self.fill(x0, y0, x0 + 1, y1, color)
        self.fill(x1 - 1, y0, x1, y1, color)

    def text(
        self, x: int, y: int, s: str, color: Sequence[int] | np.ndarray = TEXT, scale: int = 1
    ) -> int:
        """Write ``s`` (3x5 glyphs, ``scale`` pixels per dot) with its top-left at ``(x, y)``.

        Lower case is drawn as upper case; characters without a glyph are blank; text
        past the edges is cut.
        :returns: the x just after the text.
        """
        if not s:
            return x
        mask = _text_mask(s, scale)
        end = x + mask.shape[1] // 3
        region = self._bytes(x, y, end, y + mask.shape[0])
        if region.size:
            h, w = region.shape
            skip = 3 * max(-x, 0)
            _blend(region, mask[:h, skip : skip + w], self._row(color)[:w])
        return end

    def columns(
        self,
        x0: int,
        y_bottom: int,
        height: int,
        fractions: np.ndarray,
        colors: np.ndarray | Sequence[int],
        width: int = 3,
        gap: int = 1,
        back: Sequence[int] | np.ndarray = PANEL,
    ) -> int:
        """Vertical bars from the baseline ``y_bottom`` up, one per value, left to right,
        on a plain ``back`` ground: the whole bar area (``height`` rows, from ``x0`` to
        the last bar) is repainted, so draw lines over bars after them.

        :param height: pixels of a bar of fraction 1 (fractions are clipped to [0, 1]).
        :param fractions: 1-D array, each bar's height over ``height``.
        :param colors: ``(n, 3)`` uint8, or one RGB for every bar.
        :param width: pixels of a bar.  :param gap: pixels between bars.
        :param back: RGB of the ground between and above the bars.
        :returns: the x just after the last bar (``x0`` when there are none).
        """
        n = len(fractions)
        if n == 0:
            return x0
        bar, cidx = _column_layout(n, width, gap)
        end = x0 + len(bar) // 3
        region = self._bytes(x0, y_bottom - height, end, y_bottom)
        if region.size == 0:
            return end
        skip = 3 * max(-x0, 0)
        cols = slice(skip, skip + region.shape[1])
        r0 = max(height - y_bottom, 0)  # bar-area rows above the image
        small = height < 255  # compare bytes, not ints: the mask is the costly part
        tops = np.empty(n + 1, dtype=np.uint8 if small else np.int32)
        # tops = height - round(clip(fraction, 0, 1) * height), NaN as 0, in three ufunc calls
        # (np.clip costs several): the cast to int truncates the positive f + height + 1
        f = np.minimum(fractions, 1.0) * -height
        f -= 0.5
        tops[:n] = np.fmin(f, -0.5, out=f) + (height + 1)
        tops[n] = 255 if small else height  # gaps: never drawn
        ground = self._row(back)[: region.shape[1]]
        # rows above the tallest bar are plain ground: no mask there
        first = max(int(tops[:n].min()) - r0, 0)
        region[:first] = ground
        region = region[first:]
        if region.shape[0] == 0:
            return end
        rows = _row_index(r0 + first, region.shape[0], small)
        mask = rows >= tops[bar[cols]]
        colors = np.asarray(colors, dtype=np.uint8)
        cb = (
            colors.reshape(-1)[cidx[cols]]
            if colors.ndim == 2
            else self._row(colors)[: region.shape[1]]
        )
        # region = ground + mask * (bar colour - ground), in wrapping uint8 arithmetic
        np.multiply(mask.view(np.uint8), cb - ground, out=region)
        region += ground
        return end

    def gauge(
        self,
        x0: int,
        y0: int,
        x1: int,
        y1: int,
        fraction: float,
        color: Sequence[int] | np.ndarray,
        back: Sequence[int] | np.ndarray = GRID,
    ) -> None:
        """A horizontal gauge: ``[x0, x1) x [y0, y1)`` filled from the left to ``fraction``."""
        self.fill(x0, y0, x1, y1, back)
        f = min(max(float(fraction), 0.0), 1.0)
        self.fill(x0, y0, x0 + round(f * (x1 - x0)), y1, color)


# -- the shared layout -------------------------------------------------------------------------
#: panels: (x0, y0, x1, y1)
QUEUE_BOX = (6, 30, 198, 118)
SERVICE_BOX = (208, 30, 394, 118)
SIZE_BOX = (6, 146, 394, 180)
LATENCY_BOX = (6, 190, 394, 234)
BAR_W, BAR_GAP = 3, 1
#: bars that fit the queue panel and the timeline
QUEUE_BARS = (QUEUE_BOX[2] - QUEUE_BOX[0] - 4) // (BAR_W + BAR_GAP)
TIMELINE_BARS = (SIZE_BOX[2] - SIZE_BOX[0] - 4) // (BAR_W + BAR_GAP)
#: batch-size bar colours by timeline kind: 0 a batch (decode iteration), 1 a prefill
KIND_COLORS = np.array([BLUE, PURPLE], dtype=np.uint8)
#: a wait (latency) of this many SLAs fills a queue (timeline) bar; the white line is at 1
QUEUE_SPAN = 1.5
LATENCY_SPAN = 2.0


class ServerView:
    """The frame of a serving env: header, queue, service panel and timeline (module docs).

    Build it once per env and call :meth:`frame` for each frame; the service panel is
    drawn by the callable given to :meth:`frame`, on the same canvas.
    """

    def __init__(
        self,
        title: str,
        service_label: str,
        timeline_label: str,
        latency_label: str,
        timeline: Timeline,
    ) -> None:
        """:param title: the env's short name, drawn at the top right.
        :param service_label: caption of the service panel.
        :param timeline_label: caption of the batch-size strip of the timeline.
        :param latency_label: caption of the latency strip of the timeline.
        :param timeline: the env's record of recent batches (kept here, with the view).
        """
        self.timeline = timeline
        c = self.canvas = Canvas()
        c.text(WIDTH - 4 * len(title) - 6, HEIGHT - 5, title, DIM)
        c.text(QUEUE_BOX[0], 22, "QUEUE: WAIT/SLA, OLDEST LEFT", DIM)
        c.text(SERVICE_BOX[0], 22, service_label, DIM)
        c.text(SIZE_BOX[0], 138, timeline_label, DIM)
        c.text(LATENCY_BOX[0], 182, latency_label, DIM)
        for box in (QUEUE_BOX, SERVICE_BOX, SIZE_BOX, LATENCY_BOX):
            c.fill(*box, PANEL)
        c.freeze()

    def frame(
        self,
        header: str,
        waits_over_sla: np.ndarray,
        queue_len: int,
        queue_capacity: int,
        draw_service: Callable[[Canvas, tuple[int, int, int, int]], None],
        timeline: Timeline,
        queue_colors: np.ndarray | None = None,
        kind_colors: np.ndarray = KIND_COLORS,
    ) -> np.ndarray:
        """Draw one frame and return it (a new ``HEIGHT x WIDTH x 3`` uint8 array).

        :param header: the figures line at the top.
        :param waits_over_sla: waits of the oldest waiting requests over the SLA, oldest
            first (at most :data:`QUEUE_BARS` are drawn).
        :param queue_len: all waiting requests (those not drawn are counted as ``+N``).
        :param queue_capacity: the queue's capacity (the gauge under the queue).
        :param draw_service: draws the service panel: ``draw_service(canvas, box)``.
        :param timeline: the last batches (sizes over the maximum, latencies over the SLA).
        :param queue_colors: colours of the queue bars (default: by wait over SLA).
        :param kind_colors: colour of the batch-size bars by the timeline's kinds.
        """
        c = self.canvas
        img = c.begin()
        c.text(4, 4, header, TEXT, scale=2)
        # the queue
        x0, y0, x1, y1 = QUEUE_BOX
        w = waits_over_sla[:QUEUE_BARS]
        h = y1 - y0 - 4
        if len(w):
            colors = sla_colors(w) if queue_colors is None else queue_colors[:QUEUE_BARS]
            # at least one pixel: a request that just arrived is still seen
            c.columns(
                x0 + 2, y1 - 2, h, np.maximum(w / QUEUE_SPAN, 1.0 / h), colors, BAR_W, BAR_GAP
            )
        c.fill(x0, y1 - 2 - round(h / QUEUE_SPAN), x1, y1 - 1 - round(h / QUEUE_SPAN), SLA_LINE)
        fill = queue_len / queue_capacity if queue_capacity else 0.0
        c.gauge(x0, y1 + 3, x1, y1 + 8, fill, RED if fill >= 1.0 else TEAL)
        if queue_len > len(w):
            c.text(
                x1 - 4 * len(f"+{queue_len - len(w)}") - 1, y1 + 10, f"+{queue_len - len(w)}", TEXT
            )
        # the service panel
        draw_service(c, SERVICE_BOX)
        # the timeline
        x0, y0, x1, y1 = LATENCY_BOX
        h = y1 - y0 - 2
        if len(timeline):
            sizes, lat, kinds = timeline.arrays()
            sizes, lat, kinds = sizes[-TIMELINE_BARS:], lat[-TIMELINE_BARS:], kinds[-TIMELINE_BARS:]
            c.columns(
                SIZE_BOX[0] + 2,
                SIZE_BOX[3] - 1,
                SIZE_BOX[3] - SIZE_BOX[1] - 2,
                sizes,
                kind_colors[kinds],
                BAR_W,
                BAR_GAP,
            )
            c.columns(x0 + 2, y1 - 1, h, lat / LATENCY_SPAN, sla_colors(lat), BAR_W, BAR_GAP)
        line = y1 - 1 - round(h / LATENCY_SPAN)
        c.fill(x0, line, x1, line + 1, SLA_LINE)
        return img


def batch_panel(
    batch_latencies_over_sla: np.ndarray,
    size: int,
    max_size: int,
    duration_s: float,
    sla_s: float,
) -> Callable[[Canvas, tuple[int, int, int, int]], None]:
    """Service panel of ``DynamicBatching-v0``: the batch that ran in the last step.

    One bar per request of it (oldest first), its latency over the SLA, white SLA line;
    a gauge of its size over ``max_size``; its size and duration in figures. At a decision
    epoch the device is idle (a batch runs inside the step that starts it), so this is the
    batch that just completed, or nothing after a wait.
    """

    def draw(c: Canvas, box: tuple[int, int, int, int]) -> None:
        """Draw the panel on ``c`` inside ``box`` = ``(x0, y0, x1, y1)``."""
        x0, y0, x1, y1 = box
        h = y1 - y0 - 16
        n = (x1 - x0 - 4) // (BAR_W + BAR_GAP)
        lat = batch_latencies_over_sla[:n]
        if len(lat):
            c.columns(x0 + 2, y1 - 14, h, lat / QUEUE_SPAN, sla_colors(lat), BAR_W, BAR_GAP)
        line = y1 - 14 - round(h / QUEUE_SPAN)
        c.fill(x0, line, x1, line + 1, SLA_LINE)
        c.gauge(x0 + 2, y1 - 11, x1 - 2, y1 - 7, size / max_size, BLUE)
        label = (
            f"LAST BATCH {size}/{max_size} {duration_s * 1000:.2f} MS"
            if size
            else "LAST STEP: WAIT"
        )
        c.text(x0 + 2, y1 - 5, f"{label}  SLA {sla_s * 1000:g} MS", TEXT)

    return draw


def groups_panel(
    positions: np.ndarray,
    sizes: np.ndarray,
    ages_over_sla: np.ndarray,
    n_nodes: int,
    max_size: int,
    last: str,
) -> Callable[[Canvas, tuple[int, int, int, int]], None]:
    """Service panel of ``NodeBatching-v0``: the groups in flight at their node positions.

    The node chain runs left (node 0) to right (the last node), one tick per node (or per
    node span when there are more nodes than pixels); each group is a bar at its next
    node, its height its size over ``max_size``, coloured by its oldest request's age
    over the SLA.
    """

    def draw(c: Canvas, box: tuple[int, int, int, int]) -> None:
        """Draw the panel on ``c`` inside ``box`` = ``(x0, y0, x1, y1)``."""
        x0, y0, x1, y1 = box
        left, right = x0 + 6, x1 - 10
        base = y1 - 14
        h = base - y0 - 10
        c.fill(left, base, right + 4, base + 1, GRID)
        span = right - left
        step = max(1, -(-n_nodes // 64))
        ticks = left + (np.arange(0, n_nodes + 1, step) * span) // max(n_nodes, 1)
        c.image[base + 1 : base + 3, ticks] = DIM
        if len(positions):
            xs = left + (positions * span) // max(n_nodes, 1)
            tops = base - np.maximum(np.rint(sizes / max_size * h).astype(np.intp), 1)
            cols = sla_colors(ages_over_sla)
            for x, top, col in zip(xs.tolist(), tops.tolist(), cols, strict=True):
                c.fill(x, top, x + 4, base, col)
        c.text(
            x0 + 2, y0 + 2, f"{len(positions)} GROUPS  {int(sizes.sum())}/{max_size} IN FLIGHT", DIM
        )
        c.text(x0 + 2, y1 - 8, f"NODE 0 .. {n_nodes}  {last}", TEXT)

    return draw


def llm_panel(
    contexts_over_max: np.ndarray,
    running: int,
    max_seqs: int,
    cap: int,
    kv_used: int,
    kv_total: int,
    kv_watermark: int,
) -> Callable[[Canvas, tuple[int, int, int, int]], None]:
    """Service panel of ``LLMBatching-v0``: running requests and the KV cache.

    One bar per running request (oldest first), its context (prompt + generated tokens)
    over ``max_model_len``; a gauge of running requests over ``max_num_seqs`` with the cap
    as a white tick; a gauge of KV blocks in use over the capacity (teal, orange above
    90%, red when the free blocks are within the watermark) with the watermark as a tick.
    """

    def draw(c: Canvas, box: tuple[int, int, int, int]) -> None:
        """Draw the panel on ``c`` inside ``box`` = ``(x0, y0, x1, y1)``."""
        x0, y0, x1, y1 = box
        n = (x1 - x0 - 4) // (BAR_W + BAR_GAP)
        h = y1 - y0 - 34
        top = y0 + 10
        if len(contexts_over_max):
            c.columns(x0 + 2, top + h, h, contexts_over_max[:n], BLUE, BAR_W, BAR_GAP)
        gw = x1 - x0 - 4
        c.gauge(x0 + 2, y1 - 22, x1 - 2, y1 - 18, running / max_seqs, BLUE)
        xc = x0 + 2 + min(round(cap / max_seqs * gw), gw - 1)
        c.fill(xc, y1 - 24, xc + 1, y1 - 16, SLA_LINE)
        kv = kv_used / kv_total
        color = RED if kv_total - kv_used <= kv_watermark else (ORANGE if kv > 0.9 else TEAL)
        c.gauge(x0 + 2, y1 - 12, x1 - 2, y1 - 8, kv, color)
        xw = x0 + 2 + min(round((1 - kv_watermark / kv_total) * gw), gw - 1)
        c.fill(xw, y1 - 14, xw + 1, y1 - 6, SLA_LINE)
        more = f" +{running - n}" if running > n else ""
        c.text(x0 + 2, y0 + 2, f"RUNNING {running}/{max_seqs} CAP {cap}{more}", DIM)
        c.text(x0 + 2, y1 - 5, f"KV {kv_used}/{kv_total} BLOCKS {100 * kv:.0f}%", TEXT)

    return draw


#: the request classes' colours on the LLM frame (class k: ``CLASS_COLORS[k % 4]``)
CLASS_COLORS = (TEAL, ORANGE, BLUE, TEXT)


def llm_frame(view: ServerView, server: Any, cap: int, dropped: int) -> np.ndarray:
    """The LLM envs' frame: the queue (waiting requests' age over their TTFT SLA, purple
    when preempted), the running requests and the KV cache (:func:`llm_panel`), the
    iteration timeline, and with several request classes a stripe per waiting request in
    its class's colour and each class's waiting / running counts.

    :param server: the LLM server (:class:`batch_env.llm.LLMServer`): its requests
        (``state``), clock, SLAs, ``max_model_len`` and ``config.max_num_seqs``.
    :param cap: the cap in force; ``dropped``: arrivals dropped so far.
    """
    srv = server.state
    arr, now, P, G = server.arrivals, server.now, srv.prompt, srv.generated
    waiting = list(islice(srv.waiting, QUEUE_BARS))
    ttft = server.sla_books.ttft_s
    waits = np.array(
        [(now - arr[e]) / ttft[srv.request_class[e]] for e in waiting], dtype=np.float64
    )
    colors = sla_colors(waits)
    colors[np.array([G[e] > 0 for e in waiting], dtype=bool)] = PURPLE  # preempted
    R = srv.running
    ctx = np.array([P[e] + G[e] for e in R[:QUEUE_BARS]], dtype=np.float64) / server.max_model_len
    header = (
        f"T {now:.2f} S  WAIT {len(srv.waiting)}  RUN {len(R)}  PREEMPT {srv.preemptions}  "
        f"DROP {dropped}"
    )
    n = server.config.max_num_seqs
    panel = llm_panel(ctx, len(R), n, cap, srv.kv_used, srv.kv_total, srv.kv_watermark)
    img = view.frame(
        header,
        waits,
        len(srv.waiting),
        server.queue_capacity,
        panel,
        view.timeline,
        queue_colors=colors,
    )
    if server.multi:
        _draw_classes(view, server, waiting)
    return img


#: replicas a cluster frame draws (the rest are counted)
CLUSTER_ROWS = 12


class ClusterView:
    """The frame of ``LLMRouting-v0``: a row per replica (its name, waiting and running
    requests over ``max_num_seqs``, KV use), the last routed replica marked.

    :param title: the env's short name, drawn at the top right.
    """

    def __init__(self, title: str) -> None:
        c = self.canvas = Canvas()
        c.text(WIDTH - 4 * len(title) - 6, HEIGHT - 5, title, DIM)
        c.text(4, 22, "REPLICA       WAITING            RUNNING            KV", DIM)
        c.freeze()

    def frame(self, cluster: Any, last: int | None) -> np.ndarray:
        """Draw the cluster (:class:`batch_env.llm.cluster.LLMCluster`) now; ``last``: the
        replica the last arrival went to (``None``: none yet)."""
        c = self.canvas
        img = c.begin()
        c.text(4, 4, f"T {cluster.now:.2f} S  ROUTED {len(cluster.routed)}", TEXT, scale=2)
        reps = cluster.replicas[:CLUSTER_ROWS]
        h = min(16, (HEIGHT - 46) // max(len(reps), 1))
        for r, rep in enumerate(reps):
            y = 32 + r * h
            st, n = rep.state, rep.config.max_num_seqs
            waiting = len(st.waiting) + rep.unadmitted
            c.text(4, y, f"{r} {rep.profile.name[-11:]}", TEXT if r == last else DIM)
            if r == last:
                c.fill(0, y, 2, y + 5, SLA_LINE)
            w = waiting / n
            c.gauge(60, y, 130, y + 5, w, RED if w >= 1.0 else ORANGE)
            c.gauge(136, y, 206, y + 5, rep.in_service_count() / n, BLUE)
            kv = st.kv.used / st.kv.total
            c.gauge(212, y, 282, y + 5, kv, ORANGE if kv > 0.9 else TEAL)
            c.text(288, y, f"{waiting} W {rep.in_service_count()} R", DIM)
        if len(cluster.replicas) > CLUSTER_ROWS:
            c.text(4, HEIGHT - 12, f"+{len(cluster.replicas) - CLUSTER_ROWS} REPLICAS", DIM)
        return img


def _draw_classes(view: ServerView, server: Any, waiting: list[int]) -> None:
    """Request classes on the LLM frame: a stripe in the class's colour under each waiting
    request's bar, and at the bottom left each class's colour, name and requests
    waiting / running."""
    c, cls = view.canvas, server.state.request_class
    x0, _, _, y1 = QUEUE_BOX
    for i, e in enumerate(waiting):
        x = x0 + 2 + i * (BAR_W + BAR_GAP)
        c.fill(x, y1, x + BAR_W, y1 + 2, CLASS_COLORS[cls[e] % len(CLASS_COLORS)])
    waiting_n, running_n, _ = server.class_counts()
    x = 4
    for k, rc in enumerate(server.classes):
        c.fill(x, HEIGHT - 5, x + 4, HEIGHT - 1, CLASS_COLORS[k % len(CLASS_COLORS)])
        label = f"{rc.name.upper()} {waiting_n[k]}/{running_n[k]}"
        c.text(x + 6, HEIGHT - 5, label, TEXT)
        x += 6 + 4 * len(label) + 8


class Timeline:
    """A ring of the last ``n`` batches' (size over the maximum, latency over the SLA,
    kind), oldest first when read. O(1) per :meth:`push` (plain lists, no NumPy)."""

    def __init__(self, n: int = TIMELINE_BARS) -> None:
        """:param n: batches kept (an int >= 1)."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"Timeline: n={n!r} is invalid: expected an int >= 1")
        self._n = n
        self.clear()

    def clear(self) -> None:
        """Forget every batch (a new episode)."""
        self._size = [0.0] * self._n
        self._lat = [0.0] * self._n
        self._kind = [0] * self._n
        self._i = 0

    def push(self, size: float, latency: float, kind: int = 0) -> None:
        """Record one batch: its size over the maximum, its latency over the SLA, and a
        kind (an index into the colours given to :meth:`arrays`)."""
        j = self._i % self._n
        self._size[j] = size
        self._lat[j] = latency
        self._kind[j] = kind
        self._i += 1

    def __len__(self) -> int:
        """Batches held (at most ``n``)."""
        return min(self._i, self._n)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(sizes, latencies, kinds)`` of the batches held, oldest first."""
        i, n = self._i, self._n
        if i <= n:
            return (
                np.array(self._size[:i]),
                np.array(self._lat[:i]),
                np.array(self._kind[:i], dtype=np.intp),
            )
        j = i % n
        return (
            np.array(self._size[j:] + self._size[:j]),
            np.array(self._lat[j:] + self._lat[:j]),
            np.array(self._kind[j:] + self._kind[:j], dtype=np.intp),
        )


class CompletionTimeline(Timeline):
    """The timeline of an env that keeps a FIFO completion record (``DynamicBatching-v0``,
    ``NodeBatching-v0``), read from that record when a frame is drawn: nothing per step.

    Requests of one batch (or node group) complete together, so a batch is a run of equal
    times in the completion record (non-decreasing: completion is FIFO); its latency is its
    oldest request's, completion minus arrival. :meth:`sync` scans what was appended since
    the last frame (at most the last ``n`` batches' worth).
    """

    def __init__(self, n: int = TIMELINE_BARS) -> None:
        """:param n: batches kept."""
        super().__init__(n)
        self._source: list[float] | None = None
        self._pos = 0

    def sync(
        self, arrivals: list[float], completions: list[float], max_size: int, sla_s: float
    ) -> None:
        """Take in the batches completed since the last call.

        :param arrivals: arrival times by entry (``ServingLoop.arrivals``).
        :param completions: completion times of the first entries (``ServingCore._comp``);
            a new list (a new episode) starts the timeline afresh.
        :param max_size: the largest batch (sizes are divided by it).
        :param sla_s: the SLA (latencies are divided by it).
        """
        from bisect import bisect_right

        end = len(completions)
        if completions is not self._source:
            self.clear()
            self._source, self._pos = completions, 0
        j = max(self._pos, end - self._n * max_size)
        if j > self._pos:  # skipped ahead: start at the beginning of a batch
            j = bisect_right(completions, completions[j - 1], j, min(j + max_size, end))
        while j < end:
            c = completions[j]
            k = bisect_right(completions, c, j, min(j + max_size, end))
            self.push((k - j) / max_size, (c - arrivals[j]) / sla_s)
            j = k
        self._pos = end


# -- human mode --------------------------------------------------------------------------------
def write_png(path: str | Path, image: np.ndarray) -> None:
    """Write an ``H x W x 3`` uint8 image (an ``rgb_array`` frame) as an 8-bit RGB PNG,
    with the standard library's ``zlib`` only (no imaging package needed).

    :raises ValueError: for another shape or dtype.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(
            f"image of shape {image.shape} and dtype {image.dtype}: expected H x W x 3 uint8"
        )
    h, w, _ = image.shape
    raw = np.hstack([np.zeros((h, 1), dtype=np.uint8), image.reshape(h, w * 3)]).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        """One PNG chunk: length, type, data, CRC."""
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, filter 0 per row
    Path(path).write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def display_available() -> bool:
    """Whether a window can be opened: on Linux and other X11/Wayland systems, ``DISPLAY``
    or ``WAYLAND_DISPLAY`` must be set; macOS and Windows always have a display."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


#: matplotlib backends that cannot show a window
_NON_INTERACTIVE = frozenset({"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"})


class HumanWindow:
    """Shows frames for ``render_mode="human"``: in a pygame window if pygame is installed,
    else in an interactive matplotlib figure, when a display exists; otherwise prints the
    env's ANSI text and warns once (per window) that no display is available. The window
    library is imported on the first frame."""

    def __init__(self, title: str, fps: float) -> None:
        """:param title: window title.  :param fps: frames per second (``render_fps``)."""
        self.title = title
        self.fps = float(fps)
        self.backend: str | None = None  # "pygame", "matplotlib" or "text", once opened
        self._handle: Any = None
        self._warned = False

    def _open(self, frame: np.ndarray) -> str:
        why = "no display is available (DISPLAY and WAYLAND_DISPLAY are unset)"
        if display_available():
            try:
                import pygame

                pygame.init()
                pygame.display.set_caption(self.title)
                screen = pygame.display.set_mode((frame.shape[1], frame.shape[0]))
                self._handle = (pygame, screen, pygame.time.Clock())
                return "pygame"
            except Exception as exc:  # not installed, or no usable video driver
                why = f"pygame cannot open a window ({type(exc).__name__}: {exc})"
            try:
                import matplotlib
                import matplotlib.pyplot as plt

                backend = matplotlib.get_backend().lower()
                if backend in _NON_INTERACTIVE:
                    raise RuntimeError(f"matplotlib's backend {backend!r} is not interactive")
                plt.ion()
                fig, ax = plt.subplots(num=self.title)
                ax.set_axis_off()
                self._handle = (plt, fig, ax.imshow(frame))
                return "matplotlib"
            except Exception as exc:
                why += f"; matplotlib cannot either ({type(exc).__name__}: {exc})"
        return "text:" + why

    def show(self, frame: np.ndarray, text: str) -> None:
        """Show ``frame`` (or print ``text`` when no window can be opened)."""
        if self.backend is None:
            self.backend = self._open(frame)
            if self.backend.startswith("text:"):
                why = self.backend[5:]
                self.backend = "text"
                warnings.warn(
                    f"render_mode='human': {why}; printing the ANSI text instead "
                    "(use render_mode='rgb_array' for frames)",
                    UserWarning,
                    stacklevel=4,
                )
        if self.backend == "text":
            print(text)
        elif self.backend == "pygame":
            pygame, screen, clock = self._handle
            pygame.event.pump()
            surf = pygame.surfarray.make_surface(frame.swapaxes(0, 1))
            screen.blit(surf, (0, 0))
            pygame.display.flip()
            clock.tick(self.fps)
        else:
            plt, fig, im = self._handle
            im.set_data(frame)
            fig.canvas.draw_idle()
            plt.pause(1.0 / self.fps)

    def close(self) -> None:
        """Close the window, if one was opened."""
        if self.backend == "pygame":
            self._handle[0].display.quit()
        elif self.backend == "matplotlib":
            self._handle[0].close(self._handle[1])
        self.backend, self._handle = None, None
