"""Each input of a run is read once: one real ``verify`` in a subprocess, every ``open`` counted by an audit hook
(tests/readcount.py), with a negative control that plants a second read and is caught.

The inputs: pyproject.toml, the lock, its PEP 751 twin and the reference manifest. The run context
(kernodeck/verify/context.py) reads each once; the counts below leave out only the reads made inside functions of
other packages that still take a path (each named in ``ELSEWHERE``, with its owner), so that a second read by the
pipeline, the rebuild or the dossier writer fails here.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck import sources
from tests.conftest import ROOT, copy_project

READCOUNT = ROOT / "tests" / "readcount.py"
LOCK = "lockfiles/cp311-linux_x86_64-cpu.txt"
INPUTS = ("pyproject.toml", LOCK, "lockfiles/pylock.cp311-linux_x86_64-cpu.toml", "dossier/reference/manifest.toml")
# Reads inside functions that still take a path instead of the context's objects (not this pipeline's code):
# the CLI loads the Project before verify starts (and validates the machine's sources, uv's [tool.uv] in
# pyproject.toml among them); the one lock check shared with `lock --check` (kernodeck.lock) reads the lock and
# hashes it again; the SBOM (kernodeck.dossier.sbom) too.
ELSEWHERE = ("kernodeck.project.config:load_project < kernodeck.__main__:main", ":require_checked <",
             "kernodeck.dossier.sbom:build")
# Until kernodeck.sources' redaction takes the secrets read once (secrets=), each scan of a written file reads the
# machine's pip/uv configuration again, pyproject.toml's [tool.uv] with it. Measured with that keyword (the sources
# branch), no read is left outside the CLI's load_project.
if "secrets" not in inspect.signature(sources.check_written).parameters:
    ELSEWHERE += ("kernodeck.sources:",)


def counted(project: Path, out: Path, *args: str, twice: str = "") -> dict[str, dict[str, int]]:
    """Run ``python -m kernodeck ARGS`` in ``project`` under the counter: {path: {who: count}}."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(project)
    plant = ["--twice", twice] if twice else []
    subprocess.run([sys.executable, str(READCOUNT), str(out), *plant, "--", *args], cwd=project, env=env, text=True,
                   capture_output=True, timeout=900, check=False)
    data: dict[str, dict[str, int]] = json.loads(out.read_text(encoding="utf-8"))
    return data


def reads_by_the_run(counts: dict[str, dict[str, int]], project: Path) -> dict[str, int]:
    """Each input's opens for reading, less those made inside the functions ``ELSEWHERE`` names."""
    out = {}
    for rel in INPUTS:
        by = counts.get(str(project / rel), {})
        out[rel] = sum(n for who, n in by.items() if not any(mark in who for mark in ELSEWHERE))
    return out


def read_twice(counts: dict[str, dict[str, int]], project: Path) -> list[str]:
    return [rel for rel, n in reads_by_the_run(counts, project).items() if n > 1]


def test_a_stopped_run_reads_each_input_once_and_a_planted_second_read_is_caught(tmp_path: Path) -> None:
    """Cheap: a stale lock stops the run at lock-check (no env needed) after the context read every input.

    Negative control: the context's loader called twice (a planted second read of every input) is caught.
    """
    project = copy_project(tmp_path / "project")
    with (project / "requirements" / "base.in").open("a", encoding="utf-8") as handle:
        handle.write("\n# changed: the lock is stale now\n")
    clean = counted(project, tmp_path / "clean.json", "verify", "--out", str(tmp_path / "run1"))
    assert {rel: n for rel, n in reads_by_the_run(clean, project).items()} == dict.fromkeys(INPUTS, 1)
    assert read_twice(clean, project) == []
    planted = counted(project, tmp_path / "planted.json", "verify", "--out", str(tmp_path / "run2"),
                      twice="kernodeck.verify.context:load")
    # the twin is read by kernodeck.lock.pylock, which keeps one parse per file state: a second load is not a read
    assert read_twice(planted, project) == [rel for rel in INPUTS if "pylock." not in rel]
    assert any("kernodeck.verify.context:" in who for who in planted[str(project / LOCK)])


@pytest.mark.slow
def test_a_full_verify_reads_each_input_once(built_project: Path, tmp_path: Path) -> None:
    """One real verify that passes (reused env, every in-env step): each input opened at most once by the run."""
    project = copy_project(tmp_path / "project")
    (project / ".venv-rebuild").symlink_to(built_project / ".venv-rebuild", target_is_directory=True)
    out = tmp_path / "run"
    counts = counted(project, tmp_path / "counts.json", "verify", "--out", str(out))
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["status"] == "passed", [s for s in report["steps"] if s["status"] != "passed"]
    assert read_twice(counts, project) == [], {rel: counts.get(str(project / rel)) for rel in INPUTS}
    assert all(n == 1 for n in reads_by_the_run(counts, project).values())
