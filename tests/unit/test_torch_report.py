"""kernodeck/inenv/torch_report.py: torch's collect_env report written by the check process (a stand-in
``torch.utils.collect_env`` here: this process has no torch); its failure and a hung probe are the file's content,
never an exception."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernodeck.inenv import torch_report
from kernodeck.inenv.protocol import COLLECT_ENV
from tests.helpers.torchreport import stand_in


def test_the_report_is_written_as_torch_gives_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(monkeypatch, lambda: "PyTorch version: 9.9.9\nIs CUDA available: False\n")
    torch_report.begin().finish(tmp_path)
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert text == torch_report.HEAD + "PyTorch version: 9.9.9\nIs CUDA available: False\n"


def test_a_failing_report_is_recorded_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str:
        raise RuntimeError("nvidia-smi said no")

    stand_in(monkeypatch, broken)
    torch_report.begin().finish(tmp_path)
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert text == torch_report.HEAD + "not collected: RuntimeError: nvidia-smi said no\n"


def test_without_torch_the_file_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # an import of it raises ImportError
    torch_report.begin().finish(tmp_path)
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert text.startswith(torch_report.HEAD + "not collected: ModuleNotFoundError: ") and "torch" in text


def test_a_hung_probe_is_named_and_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(monkeypatch, lambda: time.sleep(30) or "late")
    began = time.monotonic()
    torch_report.begin().finish(tmp_path, wait_s=0.2)
    assert time.monotonic() - began < 20  # the step goes on; the probe's thread is a daemon, left behind
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert "not collected: still running after 0.2s" in text and "late" not in text


PIP_PROBE = [sys.executable, "-mpip", "list", "--format=freeze"]  # torch's get_pip_packages, as it runs it


def test_the_pip_probe_is_answered_in_process_and_every_other_probe_runs(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[object] = []

    def run(command: object) -> tuple[int, str, str]:
        ran.append(command)
        return 0, "gcc (Debian 12.2.0-14) 12.2.0", ""

    def report() -> str:  # as torch's get_env_info calls its module's run
        _, pip, _ = module.run(PIP_PROBE)
        _, gcc, _ = module.run("gcc --version")
        return f"pip:\n{pip}\ngcc: {gcc}\n"

    module = stand_in(monkeypatch, report, run)
    torch_report.begin().finish(tmp_path)
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert ran == ["gcc --version"]  # the pip probe started no process; gcc's did, as torch runs it
    assert f"pip:\n{torch_report.pip_list()}\ngcc: gcc (Debian" in text and "pytest==" in text
    assert "pip list probe answered from this process's installed distributions" in text  # the header says so


def test_the_in_process_answer_is_what_pip_list_prints() -> None:
    # the control: a new ``python -mpip list --format=freeze`` over the same path (no user site, no cwd)
    real = subprocess.run([sys.executable, "-s", "-P", "-mpip", "list", "--format=freeze"], capture_output=True,
                          text=True, check=True, env={"PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert torch_report.pip_list() == real.stdout.strip()


def test_the_system_step_reads_its_facts_while_the_report_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the report is begun before the chain's own probes and waited for after them: the chain's facts are read while
    # torch's probes run (a chain that waits for the report's start would wait its 5 s out, were they in turn)
    from kernodeck.inenv import system
    from kernodeck.inenv._common import Context

    begun = threading.Event()
    stand_in(monkeypatch, lambda: begun.set() or "PyTorch version: 9.9.9\n")
    monkeypatch.setattr(system, "collect", lambda: {"os": "beside" if begun.wait(5) else "after"})
    monkeypatch.setattr(system, "container", dict)
    assert system.run(Context({}, tmp_path)) == {"os": "beside"}
    assert (tmp_path / COLLECT_ENV).read_text(encoding="utf-8") == torch_report.HEAD + "PyTorch version: 9.9.9\n"


def test_a_failed_chain_puts_back_what_the_report_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torch's report sets PIP_DISABLE_PIP_VERSION_CHECK as it runs (red-team pass 23, NOTE2): a chain probe that
    # raises meanwhile fails the step, and the variable is still put back once the report ended; no file is written
    from kernodeck.inenv import system
    from kernodeck.inenv._common import Context

    def report() -> str:
        os.environ["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        return "PyTorch version: 9.9.9\n"

    def broken() -> dict[str, str]:
        raise OSError("no /proc")

    monkeypatch.delenv("PIP_DISABLE_PIP_VERSION_CHECK", raising=False)
    stand_in(monkeypatch, report)
    monkeypatch.setattr(system, "collect", broken)
    with pytest.raises(OSError, match="no /proc"):
        system.run(Context({}, tmp_path))
    assert "PIP_DISABLE_PIP_VERSION_CHECK" not in os.environ
    assert not (tmp_path / COLLECT_ENV).exists()
