"""kernodeck/inenv/torch_report.py: torch's collect_env report written by the check process (a stand-in
``torch.utils.collect_env`` here: this process has no torch); its failure and a hung probe are the file's content,
never an exception."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from kernodeck.inenv import torch_report
from kernodeck.inenv.protocol import COLLECT_ENV
from tests.helpers.torchreport import stand_in


def test_the_report_is_written_as_torch_gives_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(monkeypatch, lambda: "PyTorch version: 9.9.9\nIs CUDA available: False\n")
    torch_report.write(tmp_path)
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert text == torch_report.HEAD + "PyTorch version: 9.9.9\nIs CUDA available: False\n"


def test_a_failing_report_is_recorded_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str:
        raise RuntimeError("nvidia-smi said no")

    stand_in(monkeypatch, broken)
    torch_report.write(tmp_path)
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert text == torch_report.HEAD + "not collected: RuntimeError: nvidia-smi said no\n"


def test_without_torch_the_file_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # an import of it raises ImportError
    torch_report.write(tmp_path)
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert text.startswith(torch_report.HEAD + "not collected: ModuleNotFoundError: ") and "torch" in text


def test_a_hung_probe_is_named_and_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(monkeypatch, lambda: time.sleep(30) or "late")
    began = time.monotonic()
    torch_report.write(tmp_path, wait_s=0.2)
    assert time.monotonic() - began < 20  # the step goes on; the probe's thread is a daemon, left behind
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert "not collected: still running after 0.2s" in text and "late" not in text
