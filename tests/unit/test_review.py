"""The dossier's reviewer (kernodeck/runformat/review.py): paths and secrets stripped."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernodeck.runformat import review as dossier_review


def test_reviewer_strips_paths_and_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://bob:hunter2@private.example/simple")
    review = dossier_review.reviewer(tmp_path)
    text = review(f"ran in {tmp_path}/x with https://bob:hunter2@private.example/simple and token hunter2")
    assert "hunter2" not in text and str(tmp_path) not in text and "<project>/x" in text
