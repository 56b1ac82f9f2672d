"""README's commands on a machine whose python3 is 3.12 (Ubuntu 24.04's is): nox runs on 3.12, the declared cp311
platform is verified, its env made from the Python 3.11 found on the machine.

A real subprocess end-to-end test on a fresh machine (tests/helpers/fresh.py: empty HOME, no pip configuration, no
PIP_*/UV_* source; the cpu variant's index replaced through KERNODECK_INDEX_CPU by a loopback PEP 503 index holding the
locked torch file; everything else from PyPI): README's one-line fallback (no pipx, no uv) runs verbatim in an empty
copy of the project, with a `python3` that is this machine's 3.12 first on PATH; its nox and nox's session venv are
3.12, the rebuilt env is 3.11, the report is the cp311 platform's. The negative control points KERNODECK_BASE_PYTHON at
the 3.12 interpreter: one ERROR, nothing built. `.ci/run` gets nox the same documented way.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.env import pythons
from kernodeck.project import platforms
from kernodeck.project.config import load_project
from tests.helpers.fresh import LocalIndex, fresh_env, torch_file
from tests.helpers.project import ROOT, copy_project
from tests.helpers.reports import read_report, statuses

NOX = load_project(ROOT).tool_pins["nox"]
PLATFORM = f"cp311-{platforms.current_os_arch()}-cpu"


def fresh_machine_section() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8").split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]


def readme_fallback() -> str:
    """README's one line for a machine with neither pipx nor uv."""
    return next(line for line in fresh_machine_section().splitlines() if line.startswith("python3 -m venv "))


def version_of(python: Path) -> str:
    argv = [str(python), "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def test_readme_and_ci_get_nox_the_documented_way() -> None:
    section = fresh_machine_section()
    assert "pipx run nox -s verify" in section and "pipx run nox -s tests" in section
    assert "python3 -m pip install nox" not in section.replace("refuse `python3 -m pip install nox`", "")
    assert f"pip install nox=={NOX} && .nox-bootstrap/bin/nox -s verify" in readme_fallback()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "nox=(pipx run nox)" in ci and "nox=(uvx nox)" in ci and f"nox=={NOX}" in ci
    assert ci.rstrip().endswith('"${nox[@]}" -s tests')  # README's test command


@pytest.mark.slow
def test_readme_fallback_on_a_312_machine_verifies_the_cp311_platform(tmp_path: Path) -> None:
    try:
        py312 = pythons.find("3.12", platforms.current_os_arch())
    except pythons.PythonNotFound as exc:
        pytest.fail(f"this test needs a Python 3.12 on the machine: {exc}")
    python3 = tmp_path / "bin" / "python3"
    python3.parent.mkdir()
    python3.symlink_to(py312.path)
    mirror = LocalIndex([torch_file(tmp_path)])
    with mirror.serving():
        env = fresh_env(tmp_path / "home", KERNODECK_INDEX_CPU=mirror.url)
        # This test's tools venv (nox, uv) leaves PATH: the machine has python3 (3.12) and nothing else of ours.
        path = [str(python3.parent)] + [p for p in env["PATH"].split(os.pathsep)
                                        if p != str(Path(sys.executable).parent)]
        env["PATH"] = os.pathsep.join(path)
        project = copy_project(tmp_path / "fresh")
        out = tmp_path / "run"
        proc = subprocess.run(["bash", "-c", f"{readme_fallback()} -- --out {shlex.quote(str(out))}"], cwd=project,
                              env=env, text=True, capture_output=True, timeout=1500, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert any(r.startswith("/files/torch-") for r in mirror.requests)
    assert version_of(project / ".nox-bootstrap/bin/python") == "3.12"  # nox ran on 3.12
    assert version_of(project / ".nox/verify/bin/python") == "3.12"  # and so did kernodeck
    report = read_report(out)
    assert report["platform"] == PLATFORM and report["status"] == "passed"
    assert statuses(report)["rebuild"] == "passed" and statuses(report)["inventory"] == "passed"
    assert version_of(project / f".venv-rebuild/{PLATFORM}/current/bin/python") == "3.11"
    rebuild = next(s for s in report["steps"] if s["name"] == "rebuild")  # type: ignore[union-attr]
    base = rebuild["details"]["base_python"]
    assert base["version"].startswith("3.11.") and base["found_by"] and base["path"].endswith("python3.11")

    # Negative control: had the env been made from nox's Python, the check says so and nothing is built.
    envs = sorted((project / ".venv-rebuild").glob("*/env-*"))
    wrong = str(project / ".nox-bootstrap/bin/python")
    proc = subprocess.run([str(project / ".nox-bootstrap/bin/nox"), "-s", "verify", "--", "--fresh", "--out",
                           str(tmp_path / "wrong")], cwd=project, env={**env, "KERNODECK_BASE_PYTHON": wrong},
                          text=True, capture_output=True, timeout=600, check=False)
    said = proc.stdout + proc.stderr  # nox passes the session's output on
    assert proc.returncode != 0
    assert f"ERROR: KERNODECK_BASE_PYTHON={wrong} is not a CPython 3.11 for" in said
    assert "TIP: point KERNODECK_BASE_PYTHON at a CPython 3.11, or unset it" in said
    assert sorted((project / ".venv-rebuild").glob("*/env-*")) == envs
