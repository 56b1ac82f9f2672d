"""Each input is read once: one real ``verify`` in a subprocess, every ``open`` counted by an audit hook
(tests/helpers/readcount.py), with a negative control that plants a second read of each input and is caught.

The inputs: pyproject.toml, the lock, its PEP 751 twin and the reference manifest. pyproject.toml is read once by the
CLI's load of the Project (the run context takes that Project; the check of uv's ``[tool.uv]`` finds the same bytes
in kernodeck.sources' content cache); the lock and its twin once by the run context (kernodeck.lock.read_lock), which
the lock check, the rebuild, the SBOM and the dossier take; the manifest once by the run context. No read is exempt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.project import copy_project
from tests.helpers.sharedruns import SharedRun, run_counted, settled

LOCK = "lockfiles/cp311-linux_x86_64-cpu.txt"
TWIN = "lockfiles/pylock.cp311-linux_x86_64-cpu.toml"
INPUTS = ("pyproject.toml", LOCK, TWIN, "dossier/reference/manifest.toml")
# The planted second reads, one per input: its reader called twice (--twice), or, where that reader keeps one parse
# per file state so that a second call reads nothing (pyproject.toml through kernodeck.sources' content cache, the
# twin through kernodeck.lock.twin's), the file read again by the run context's loader (--reread), as the context
# read pyproject.toml and the SBOM read the twin before they took what was read once.
PLANTS: dict[str, tuple[str, ...]] = {
    "pyproject.toml": ("--reread", "kernodeck.verify.context:load", "pyproject.toml"),
    LOCK: ("--twice", "kernodeck.lock.check:read_lock"),
    TWIN: ("--reread", "kernodeck.verify.context:load", TWIN),
    "dossier/reference/manifest.toml": ("--twice", "kernodeck.verify.context:_reference"),
}


def counted(project: Path, out: Path, *args: str, plant: tuple[str, ...] = ()) -> dict[str, dict[str, int]]:
    """Run ``python -m kernodeck ARGS`` in ``project`` under the counter: {path: {who: count}}."""
    run_counted(project, out, *args, plant=plant)
    data: dict[str, dict[str, int]] = json.loads(out.read_text(encoding="utf-8"))
    return data


def reads(counts: dict[str, dict[str, int]], project: Path) -> dict[str, int]:
    """Each input's opens for reading, by anyone (no exemption)."""
    return {rel: sum(counts.get(str(project / rel), {}).values()) for rel in INPUTS}


def read_twice(counts: dict[str, dict[str, int]], project: Path) -> list[str]:
    return [rel for rel, n in reads(counts, project).items() if n > 1]


def test_a_stopped_run_reads_each_input_once_and_a_planted_second_read_is_caught(tmp_path: Path) -> None:
    """Cheap: a stale lock stops the run at lock-check (no env needed) after the context read every input.

    Negative control, for every input: its reader called twice (a planted second read) is caught.
    """
    project = copy_project(tmp_path / "project")
    with (project / "requirements" / "base.in").open("a", encoding="utf-8") as handle:
        handle.write("\n# changed: the lock is stale now\n")
    settled(project)
    clean = counted(project, tmp_path / "clean.json", "verify", "--out", str(tmp_path / "run1"))
    assert reads(clean, project) == dict.fromkeys(INPUTS, 1), {rel: clean.get(str(project / rel)) for rel in INPUTS}
    for n, (rel, plant) in enumerate(PLANTS.items()):
        planted = counted(project, tmp_path / f"planted{n}.json", "verify", "--out", str(tmp_path / f"run-p{n}"),
                          plant=plant)
        assert read_twice(planted, project) == [rel], (plant, reads(planted, project))


@pytest.mark.slow
def test_a_full_verify_reads_each_input_once(passed_run: SharedRun) -> None:
    """One real verify that passes (reused env, every in-env step): each input opened exactly once by the run. It is
    the session's shared passing run, made under the counter in a settled sibling (tests/helpers/sharedruns.py)."""
    project, counts = passed_run.project, passed_run.counts()
    report = json.loads((passed_run.out / "report.json").read_text(encoding="utf-8"))
    assert report["status"] == "passed", [s for s in report["steps"] if s["status"] != "passed"]
    assert reads(counts, project) == dict.fromkeys(INPUTS, 1), {rel: counts.get(str(project / rel)) for rel in INPUTS}
