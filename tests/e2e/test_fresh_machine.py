"""README's commands on a machine that is not this one (issue 12): no pip configuration, no PIP_*/UV_* source, an
empty HOME; the cpu variant's index replaced through KERNODECK_INDEX_CPU by a PEP 503 index the test serves on
127.0.0.1, holding only the torch file whose hash the lock pins. Everything else comes from PyPI.

Real ``nox`` subprocesses in a copy of the project, as a user runs them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.fresh import LocalIndex, fresh_env, run_nox, torch_file
from tests.helpers.project import copy_project

pytestmark = [pytest.mark.slow, pytest.mark.network]


def _written(project: Path) -> list[Path]:
    skip = (".nox", ".venv-rebuild")
    return [p for p in project.rglob("*") if p.is_file() and p.relative_to(project).parts[0] not in skip]


@pytest.mark.reliability(
    41,
    "a fresh machine: `nox -s rebuild -- --fresh` with PIP_CONFIG_FILE=/dev/null, an empty HOME and no "
    "PIP_*/UV_* source (the torch file lived only in this machine's find-links); then the mirror holding no torch file",
    "rebuild and verify pass from PyPI plus the mirror; without the file, one ERROR names the variant's index "
    "and its mirror variable, keeps uv's reason and says no previous environment existed",
)
def test_fresh_machine_rebuilds_and_verifies_from_pypi_and_a_mirror(tmp_path: Path) -> None:
    locked_torch = torch_file(tmp_path)
    project = copy_project(tmp_path / "project")

    # Negative control first (fast: resolution fails before any download): a mirror without the locked torch file.
    empty = LocalIndex([], projects=("torch",))
    with empty.serving():
        env = fresh_env(tmp_path / "home", KERNODECK_INDEX_CPU=empty.url)
        proc = run_nox(project, env, "-s", "rebuild", "--", "--fresh")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    error = next(line for line in out.splitlines() if line.startswith("ERROR:"))
    assert "the cpu variant's index" in error and "KERNODECK_INDEX_CPU" in error, error
    assert "torch" in error and "2.13.0+cpu" in error, error  # uv's own reason, not only its first line
    tip = next(line for line in out.splitlines() if line.startswith("TIP:"))
    assert "untouched" not in tip and "none existed" in tip, tip
    assert any(r.startswith("/simple/torch") for r in empty.requests)

    # Without any mirror, where the declared index cannot be reached (this machine; not a CI runner): one ERROR
    # names the variant's index.
    from kernodeck.sources import reachable

    declared = "https://download.pytorch.org/whl/cpu"
    if not reachable(declared)[0]:
        proc = run_nox(project, fresh_env(tmp_path / "home"), "-s", "rebuild", "--", "--fresh")
        error = next(line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR:"))
        assert proc.returncode != 0 and f"the cpu variant's index {declared}" in error, error

    mirror = LocalIndex([locked_torch])
    with mirror.serving():
        env = fresh_env(tmp_path / "home", KERNODECK_INDEX_CPU=mirror.url)
        rebuilt = run_nox(project, env, "-s", "rebuild", "--", "--fresh")
        assert rebuilt.returncode == 0, (rebuilt.stdout + rebuilt.stderr)[-4000:]
        verified = run_nox(project, env, "-s", "verify", "--", "--out", "runs/fresh")
        assert verified.returncode == 0, (verified.stdout + verified.stderr)[-4000:]
    assert f"/files/{locked_torch.name}" in [r.replace("%2B", "+") for r in mirror.requests]

    dossier = project / "runs" / "fresh"
    report = json.loads((dossier / "report.json").read_text(encoding="utf-8"))
    assert report["status"] == "passed"
    rebuild_step = next(s for s in report["steps"] if s["name"] == "rebuild")
    assert "mirror (KERNODECK_INDEX_CPU" in rebuild_step["details"]["index"]
    procedure = (dossier / "procedure.md").read_text(encoding="utf-8")
    assert '--extra-index-url "$KERNODECK_INDEX_CPU"' in procedure and "mirror" in procedure  # the shell expands it
    # The mirror's URL (its port) is written nowhere: not in the dossier, not in the project.
    port = mirror.url.split(":")[2].split("/")[0]
    leaked = [p for p in _written(project) if f"127.0.0.1:{port}".encode() in p.read_bytes()]
    assert leaked == []
