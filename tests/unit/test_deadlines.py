"""kernodeck/project/deadlines.py: pyproject's table over generous defaults, scaled; bad names and scales refused;
and the signal forwarding that hands a signal to nox on to the command (kernodeck/noxsessions.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import suppress
from pathlib import Path

import pytest

from kernodeck.errors import ConfigError
from kernodeck.inenv.steptable import BY_NAME
from kernodeck.project import deadlines

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_cover_every_step_and_the_table_and_scale_apply() -> None:
    plain = deadlines.load({}, environ={})
    assert set(plain.steps) == set(BY_NAME) and plain.stall == deadlines.DEFAULT_STALL_S
    assert min(plain.steps.values()) >= 600  # generous: a healthy run on a slow machine never trips them
    mine = deadlines.load({"deadlines": {"application": 30, "stall": 10}}, environ={deadlines.SCALE_ENV: "2"})
    assert mine.step("application") == 60 and mine.stall == 20 and mine.scale == 2
    assert mine.step("settings") == 2 * deadlines.DEFAULTS["settings"]
    assert mine.as_dict()["steps_s"]["application"] == 60


@pytest.mark.parametrize("raw", ["0", "-1", "fast", "nan", "inf"])
def test_a_bad_scale_is_one_error_with_a_tip(raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        deadlines.load({}, environ={deadlines.SCALE_ENV: raw})
    assert "must be a number > 0" in str(caught.value) and "--deadline-scale" in caught.value.tip


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="aplication: not an in-env step nor stall"):
        deadlines.load({"deadlines": {"aplication": 30}}, environ={})


def test_the_cli_takes_deadline_scale_on_the_commands_that_run_the_application() -> None:
    from kernodeck.cli.dispatch import build_parser
    from kernodeck.errors import UsageError

    parser = build_parser()
    assert parser.parse_args(["verify", "--deadline-scale", "2.5"]).deadline_scale == 2.5
    assert parser.parse_args(["bisect", "--good", "a", "--bad", "b", "--deadline-scale", "3"]).deadline_scale == 3
    with pytest.raises(UsageError, match="--deadline-scale must be a number > 0"):  # one ERROR + TIP, not usage
        parser.parse_args(["verify", "--deadline-scale", "0"])
    with pytest.raises(UsageError, match="unrecognized arguments: --deadline-scale"):
        parser.parse_args(["lock", "--deadline-scale", "2"])  # lock runs no application


def test_the_commands_that_take_a_scale_are_the_sessions_that_forward_signals() -> None:
    from kernodeck import noxsessions

    assert set(deadlines.COMMANDS) == noxsessions.RUN_THE_APPLICATION


FORWARDER = textwrap.dedent('''\
    import subprocess, sys, time
    from kernodeck import noxsessions

    child = [sys.executable, "-c", "import signal, sys, time\\n"
             "signal.signal(signal.SIGTERM, lambda *a: (print('child got SIGTERM', flush=True), sys.exit(0)))\\n"
             "print('ready', flush=True)\\ntime.sleep(60)"]
    use = sys.argv[1] == "forward"
    with noxsessions.forwarding_signals() if use else open("/dev/null"):
        proc = subprocess.Popen(child, stdout=sys.stdout)
        proc.wait()
    print("parent still here", flush=True)
''')


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="forwarding lists children through /proc (Linux)")
@pytest.mark.parametrize("mode", ["forward", "plain"])
def test_a_signal_to_nox_reaches_the_command(tmp_path: Path, mode: str) -> None:
    script = tmp_path / "forwarder.py"
    script.write_text(FORWARDER, encoding="utf-8")
    with subprocess.Popen([sys.executable, str(script), mode], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          stdout=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        finally:
            with suppress(ProcessLookupError):  # the group this test started: the child too, in the plain case
                os.killpg(proc.pid, signal.SIGKILL)
        out = proc.stdout.read()
    if mode == "forward":
        assert "child got SIGTERM" in out and "parent still here" in out and proc.returncode == 0
    else:  # the negative control: without it the parent dies at once and the command never hears of it
        assert "child got SIGTERM" not in out and proc.returncode == -signal.SIGTERM
