"""Pictures as SVG, written by hand with the standard library (the orchestrator has no plotting library).

Deterministic: the same numbers give the same bytes. Two pictures: calibrate's chart (per output and number, each
variation's noise and the margin of use on a log scale, the declared tolerance as a line) and drift's heatmap.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, unescape

WIDTH = 760
ROW = 18
PLOT_LEFT, PLOT_RIGHT = 170, 730
GREEN, AMBER, RED, GREY, BLUE = "#2e7d32", "#f9a825", "#c62828", "#9e9e9e", "#1565c0"
# A sans-serif character's width as a share of its font size, taken wide (the average of DejaVu Sans and Helvetica
# over digits and lower case is about 0.55): the picture is made wide enough for every label at this estimate.
CHAR_EM = 0.6
PAD = 8  # blank space kept around the outermost label
_TEXT = re.compile(r'<text x="([-0-9.]+)" y="[-0-9.]+" font-size="([0-9]+)" text-anchor="(start|middle|end)"'
                   r'[^>]*>(.*?)</text>')


@dataclass(frozen=True)
class Panel:
    """One number of one output: the noise of each variation, the margin, the declared bound, the proposal."""

    title: str
    points: list[tuple[str, float]]
    margin: float | None
    declared: float | None
    proposal: float | None = None
    floor: float = 0.0


def _text(x: float, y: float, text: str, size: int = 11, anchor: str = "start", fill: str = "#222") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-family="sans-serif">{escape(text)}</text>')


def _decades(values: list[float]) -> tuple[int, int]:
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return -12, 0
    low, high = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    return low, max(high, low + 1)


def calibration_chart(panels: list[Panel]) -> str:
    """Per panel a log axis: dots for the noise (a zero drawn at the axis' left edge, hollow), a red bar at the
    margin, a dashed line at the declared tolerance, a green tick at the proposal."""
    parts: list[str] = []
    y = 30.0
    for panel in panels:
        values = [v for _, v in panel.points] + [v for v in (panel.margin, panel.declared, panel.proposal,
                                                               panel.floor) if v]
        low, high = _decades([v for v in values if v is not None])

        def xpos(value: float, low: int = low, high: int = high) -> float:
            if value <= 0:
                return float(PLOT_LEFT)
            t = (math.log10(value) - low) / (high - low)
            return PLOT_LEFT + max(0.0, min(1.0, t)) * (PLOT_RIGHT - PLOT_LEFT)

        parts.append(_text(10, y, panel.title, 13))
        y += 10
        rows = max(1, len(panel.points))
        bottom = y + rows * ROW + 6
        parts.append(f'<rect x="{PLOT_LEFT}" y="{y:.1f}" width="{PLOT_RIGHT - PLOT_LEFT}" '
                     f'height="{bottom - y:.1f}" fill="#fafafa" stroke="#ccc"/>')
        for exp in range(low, high + 1):
            x = xpos(10.0**exp)
            parts.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" stroke="#e0e0e0"/>')
            parts.append(_text(x, bottom + 12, f"1e{exp}", 9, "middle", "#666"))
        for number, (name, value) in enumerate(panel.points):
            cy = y + 6 + ROW * number + ROW / 2
            parts.append(_text(PLOT_LEFT - 6, cy + 4, name, 10, "end"))
            hollow = value <= 0
            parts.append(f'<circle class="noise" cx="{xpos(value):.1f}" cy="{cy:.1f}" r="4" '
                         f'fill="{"none" if hollow else BLUE}" stroke="{BLUE}"/>')
            if hollow:
                parts.append(_text(xpos(value) + 8, cy + 4, "equal (0)", 9, fill="#666"))
        if panel.margin is not None:
            x = xpos(panel.margin)
            parts.append(f'<line class="margin" x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" '
                         f'stroke="{RED}" stroke-width="3"/>')
            parts.append(_text(x, bottom + 48, f"margin {panel.margin:.3g}", 10, "middle", RED))
        if panel.declared is not None:
            x = xpos(panel.declared)
            parts.append(f'<line class="declared" x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x:.1f}" y2="{bottom + 2:.1f}" '
                         f'stroke="#000" stroke-width="1.5" stroke-dasharray="5,3"/>')
            parts.append(_text(x, bottom + 24, f"declared {panel.declared:.3g}", 10, "middle"))
        if panel.proposal is not None:
            x = xpos(panel.proposal)
            parts.append(f'<line class="proposal" x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" '
                         f'stroke="{GREEN}" stroke-width="2"/>')
            parts.append(_text(x, bottom + 36, f"proposal {panel.proposal:.3g}", 10, "middle", GREEN))
        y = bottom + 74
    legend = ("blue: noise of each variation against the reference (hollow: equal); red: margin of use; "
              "dashed: declared tolerance; green: proposal")
    parts.append(_text(10, y, legend, 10, fill="#444"))
    height = int(y + 16)
    return _document(WIDTH, height, parts)


def text_extent(x: float, text: str, size: int, anchor: str) -> tuple[float, float]:
    """The estimated left and right edge of a label drawn at ``x`` (:data:`CHAR_EM` per character)."""
    width = len(text) * size * CHAR_EM
    left = x - {"start": 0.0, "middle": width / 2, "end": width}[anchor]
    return left, left + width


def _document(width: int, height: int, parts: list[str]) -> str:
    """The picture, widened (to the left too) so that every label's estimated extent lies inside it: a long
    variation name or caption is never cut at an edge."""
    extents = [text_extent(float(m[1]), unescape(m[4]), int(m[2]), m[3]) for m in map(_TEXT.match, parts) if m]
    x0 = min(0, math.floor(min((left for left, _ in extents), default=0.0) - PAD))
    right = max(width, math.ceil(max((r for _, r in extents), default=0.0) + PAD))
    box = f"{x0} 0 {right - x0} {height}"
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{right - x0}" height="{height}" viewBox="{box}">'
    at = f'x="{x0}" ' if x0 else ""
    return "\n".join([head, f'<rect {at}width="{right - x0}" height="{height}" fill="white"/>', *parts, "</svg>", ""])


@dataclass(frozen=True)
class Heatmap:
    """One output's pairwise numbers: ``cells[(i, j)] = (text, ratio to the declared bound)``."""

    title: str
    labels: list[str]
    cells: dict[tuple[int, int], tuple[str, float | None]] = field(default_factory=dict)


def _colour(ratio: float | None) -> str:
    if ratio is None:
        return GREY
    if ratio <= 0:
        return "#e8f5e9"
    if ratio <= 0.1:
        return "#a5d6a7"
    if ratio <= 1.0:
        return AMBER if ratio > 0.5 else "#66bb6a"
    return RED


def heatmap(maps: list[Heatmap]) -> str:
    """Per output a square of cells coloured by the share of the declared tolerance they use (red: beyond it)."""
    cell = 64
    parts: list[str] = []
    y = 24.0
    width = 360
    for hm in maps:
        parts.append(_text(10, y, hm.title, 13))
        y += 14
        left = 200
        n = len(hm.labels)
        for i, label in enumerate(hm.labels):
            parts.append(_text(left - 6, y + i * cell + cell / 2 + 4, label, 10, "end"))
            parts.append(_text(left + i * cell + cell / 2, y + n * cell + 14, str(i + 1), 10, "middle"))
            parts.append(_text(left - 6, y + i * cell + cell / 2 + 16, f"({i + 1})", 9, "end", "#666"))
        for (i, j), (text, ratio) in sorted(hm.cells.items()):
            x, cy = left + j * cell, y + i * cell
            parts.append(f'<rect class="cell" x="{x}" y="{cy:.1f}" width="{cell - 2}" height="{cell - 2}" '
                         f'fill="{_colour(ratio)}"/>')
            parts.append(_text(x + cell / 2 - 1, cy + cell / 2 + 3, text, 9, "middle"))
        width = max(width, left + n * cell + 20)
        y += n * cell + 40
    parts.append(_text(10, y, "cell: the pair's number; colour: its share of the declared tolerance "
                       "(green well inside, amber over half, red beyond)", 10, fill="#444"))
    return _document(width, int(y + 16), parts)
