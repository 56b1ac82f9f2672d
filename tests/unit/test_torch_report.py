"""kernodeck/inenv/torch_report.py: torch's collect_env report written by the check process (a stand-in
``torch.utils.collect_env`` here: this process has no torch); its failure and a hung probe are the file's content,
never an exception."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from kernodeck.inenv import torch_report
from kernodeck.inenv._common import Context
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
    torch_report.write(tmp_path)
    text = (tmp_path / COLLECT_ENV).read_text(encoding="utf-8")
    assert ran == ["gcc --version"]  # the pip probe started no process; gcc's did, as torch runs it
    assert f"pip:\n{torch_report.pip_list()}\ngcc: gcc (Debian" in text and "pytest==" in text
    assert "pip list probe answered from this process's installed distributions" in text  # the header says so


def test_the_in_process_answer_is_what_pip_list_prints() -> None:
    # the control: a new ``python -mpip list --format=freeze`` over the same path (no user site, no cwd)
    real = subprocess.run([sys.executable, "-s", "-P", "-mpip", "list", "--format=freeze"], capture_output=True,
                          text=True, check=True, env={"PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert torch_report.pip_list() == real.stdout.strip()


def test_begun_beside_the_settings_on_a_build_without_a_gpu_runtime_and_written_at_the_system_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU build (torch.version.cuda and hip None): the settings step begins the report (runner.py gives it
    torch_report.begin); the system step writes what it found. The variable its probe set is put back; one set before
    it began stays."""
    def report() -> str:
        os.environ["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"  # as torch's get_pip_packages does
        return "PyTorch version: 9.9.9\n"

    stand_in(monkeypatch, report)
    monkeypatch.setattr(sys.modules["torch"], "version", types.SimpleNamespace(cuda=None, hip=None), raising=False)
    monkeypatch.delenv("PIP_DISABLE_PIP_VERSION_CHECK", raising=False)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    ctx = Context(config={}, out=tmp_path)
    torch_report.begin(ctx)
    started = ctx.state.pop(torch_report.STARTED)
    started.thread.join(10)
    assert started.found == ["PyTorch version: 9.9.9\n"]  # done before the system step asks
    torch_report.write(tmp_path, started=started)
    assert (tmp_path / COLLECT_ENV).read_text(encoding="utf-8") == torch_report.HEAD + "PyTorch version: 9.9.9\n"
    assert "PIP_DISABLE_PIP_VERSION_CHECK" not in os.environ and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


@pytest.mark.parametrize("runtime", [{"cuda": "13.0", "hip": None}, {"cuda": None, "hip": "7.1"}])
def test_a_build_with_a_gpu_runtime_begins_its_report_at_the_system_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: dict[str, str | None]) -> None:
    """Control: a CUDA or ROCm build's probe initialises the GPU (torch.cuda.init), so it is not begun beside the
    settings but after them, by the system step's write, as before."""
    calls: list[str] = []
    stand_in(monkeypatch, lambda: calls.append("report") or "PyTorch version: 9.9.9\n")
    monkeypatch.setattr(sys.modules["torch"], "version", types.SimpleNamespace(**runtime), raising=False)
    ctx = Context(config={}, out=tmp_path)
    torch_report.begin(ctx)
    assert torch_report.STARTED not in ctx.state and calls == []
    torch_report.write(tmp_path, started=ctx.state.pop(torch_report.STARTED, None))
    assert calls == ["report"]
    assert (tmp_path / COLLECT_ENV).read_text(encoding="utf-8").endswith("PyTorch version: 9.9.9\n")


def test_a_variable_set_after_the_report_began_would_be_put_back_with_the_probes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the settings step sets its variable before it begins anything beside it: write() puts back everything that
    changed in os.environ since the report began (the probe's changes), whoever changed it."""
    stand_in(monkeypatch, lambda: "PyTorch version: 9.9.9\n")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    started = torch_report.start()
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # too late: after the report began
    try:
        torch_report.write(tmp_path, started=started)
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    finally:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
