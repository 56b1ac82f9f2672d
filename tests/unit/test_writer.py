"""The dossier writer's review (kernodeck/verify/writer.py): every text file scrubbed with the secrets read once into
the run context, then scanned; a value left fails the write and the file is removed."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck import sources
from kernodeck.runformat import review as review_mod
from kernodeck.verify import writer

TOKEN = "QTOKEN42"
QUERY_URL = f"https://idx.example.com/simple?access_token={TOKEN}"


@pytest.fixture
def staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A staged dossier of a project, on a machine whose only source is an index URL holding a token."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", QUERY_URL)
    monkeypatch.chdir(tmp_path)
    project = SimpleNamespace(root=tmp_path / "project", variants={})
    folder = tmp_path / "staging"
    (folder / "outputs").mkdir(parents=True)
    (folder / "outputs" / "embeddings.npy").write_bytes(b"\x93NUMPY " + TOKEN.encode())  # binary: left as it is
    return SimpleNamespace(project=project, staging=folder, secrets=sources.secrets([]))


def test_review_scrubs_sources_and_paths(staged: Any) -> None:
    report = staged.staging / "report.md"
    report.write_text(f"installed from {QUERY_URL} in {staged.project.root}/x\n", encoding="utf-8")
    writer.review(staged)
    text = report.read_text(encoding="utf-8")
    assert TOKEN not in text and "<project>/x" in text and str(staged.project.root) not in text
    assert TOKEN.encode() in (staged.staging / "outputs" / "embeddings.npy").read_bytes()


def test_a_secret_the_scrub_misses_fails_the_write(staged: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: with a scrub that misses it, the scan still refuses the file and removes it."""
    report = staged.staging / "report.md"
    report.write_text(f"token {TOKEN}\n", encoding="utf-8")
    monkeypatch.setattr(review_mod, "scrub_text", lambda text, *args, **kwargs: text)
    with pytest.raises(sources.SecretInText):
        writer.review(staged)
    assert not report.exists()
