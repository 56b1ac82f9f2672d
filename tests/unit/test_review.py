"""The dossier's reviewer (kernodeck/runformat/review.py): paths and secrets stripped."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from kernodeck.runformat import review as dossier_review


def test_reviewer_strips_paths_and_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://bob:hunter2@private.example/simple")
    review = dossier_review.reviewer(tmp_path)
    text = review(f"ran in {tmp_path}/x with https://bob:hunter2@private.example/simple and token hunter2")
    assert "hunter2" not in text and str(tmp_path) not in text and "<project>/x" in text


def test_the_install_names_a_lock_in_a_folder_with_a_space_as_one_word() -> None:
    """The container files' RUN/%post and procedure.md run these by a shell: a lockfiles folder with a space (or a
    quote) stays one argument; the control: an ordinary path is written as it is."""
    install = dossier_review.pip_steps("my locks/it's.txt", "")[1]
    assert shlex.split(install)[-2:] == ["-r", "my locks/it's.txt"]
    assert dossier_review.pip_steps("lockfiles/x.txt", "")[1].endswith(" -r lockfiles/x.txt")
