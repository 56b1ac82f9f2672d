"""kernodeck/verify/steps/in_env.py: collect_env runs beside the checks at a lower priority than theirs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kernodeck.verify.steps import in_env

# Stands for the env's interpreter: reads its own niceness once the parent had time to lower it, and prints it.
FAKE_PYTHON = """#!/bin/sh
exec "{python}" -c 'import os, time; time.sleep(0.5); print("niceness", os.getpriority(os.PRIO_PROCESS, 0))'
"""


def _niceness_seen(tmp_path: Path) -> int:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(python=os.path.realpath(sys.executable)), encoding="utf-8")
    python.chmod(0o755)
    collected = in_env.CollectEnv.start(python, tmp_path)
    collected.finish(tmp_path / "collect_env.txt", timeout=30)
    text = (tmp_path / "collect_env.txt").read_text(encoding="utf-8")
    return int(text.split("niceness ", 1)[1].split()[0])


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no process priorities here")
def test_collect_env_yields_the_cpu_to_the_checks(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert _niceness_seen(tmp_path) == min(19, ours + in_env.COLLECT_ENV_NICENESS)


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no process priorities here")
def test_without_the_lowering_it_runs_at_the_checks_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: the reading above is the lowering's doing, not the fake interpreter's."""
    monkeypatch.setattr(in_env, "_lower_priority", lambda pid: None)
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    if ours >= 19:
        pytest.skip("this process already runs at the lowest priority: no lowering to show")
    assert _niceness_seen(tmp_path) == ours
