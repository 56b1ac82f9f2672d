"""kernodeck/measure/svg.py: every label of the calibration chart and the drift heatmap lies inside the picture.

The check reads the SVG as a viewer would: each ``<text>``'s estimated extent (its characters at 0.6 of the font size,
from its ``x`` and ``text-anchor``) against the ``viewBox``. It is the test's own estimate, not the renderer's.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from kernodeck.measure import svg

NS = "{http://www.w3.org/2000/svg}"
EXAMPLES = Path(__file__).parents[2] / "docs" / "calibration-example"
LONG = "07-threads-1-isa-avx2-with-a-name-as-long-as-a-variation-folder-can-be"


def labels_outside(text: str) -> list[str]:
    """The labels whose estimated extent leaves the picture's viewBox (left or right)."""
    root = ET.fromstring(text)
    x0, _, width, _ = (float(v) for v in root.get("viewBox", "").split())
    outside = []
    for node in root.iter(f"{NS}text"):
        label = node.text or ""
        extent = len(label) * float(node.get("font-size", "0")) * 0.6
        x = float(node.get("x", "0"))
        left = x - {"start": 0.0, "middle": extent / 2, "end": extent}[node.get("text-anchor", "start")]
        if left < x0 or left + extent > x0 + width:
            outside.append(label)
    return outside


def _heatmap() -> str:
    labels = ["reference", "00-declared", LONG]
    cells = {(i, j): ("1.6e-07", 0.01) for i in range(3) for j in range(3)}
    return svg.heatmap([svg.Heatmap("embeddings (cosine)", labels, cells)])


def _chart() -> str:
    # the proposal sits at the right end of the axis: its label, centred there, reaches past the plot's edge
    panel = svg.Panel("embeddings: max abs (a title long enough to need more than the default width of the chart)",
                      [("declared", 1e-7), (LONG, 0.0), ("isa-default", 3e-6)], margin=4e-3, declared=1e-4,
                      proposal=1e-2)
    return svg.calibration_chart([panel])


def test_a_long_label_stays_inside_the_heatmap_and_the_chart() -> None:
    for text in (_heatmap(), _chart()):
        assert LONG in text
        assert labels_outside(text) == []
    assert _heatmap() == _heatmap() and _chart() == _chart()  # still deterministic


def test_the_check_finds_a_label_the_old_frame_cut() -> None:
    """The frame the renderer drew before (a fixed width: 360 or the cells' width, 760 for the chart, origin 0)
    cut the caption and a long variation name; the check names them."""
    heat = _heatmap()
    old = re.sub(r'viewBox="[^"]+"', 'viewBox="0 0 412 400"', heat, count=1)
    cut = labels_outside(old)
    assert LONG in cut and any(label.startswith("cell: the pair's number") for label in cut)
    chart = re.sub(r'viewBox="[^"]+"', 'viewBox="0 0 760 300"', _chart(), count=1)
    assert LONG in labels_outside(chart) and "proposal 0.01" in labels_outside(chart)


def test_the_committed_example_pictures_keep_every_label_inside() -> None:
    pictures = sorted(EXAMPLES.rglob("*.svg"))
    assert len(pictures) >= 4, pictures
    for picture in pictures:
        assert labels_outside(picture.read_text(encoding="utf-8")) == [], picture
