"""A real ``verify`` names the reference's lineage: its id, date and lock in report.md, and as differences from the
reference a lock other than the one this run checked and a rollback to an older history manifest.

No torch is needed: ``--python`` takes this test session's interpreter (the run stops at the settings step, torch
being absent, after the reference was judged and its lineage recorded; the report is written all the same).
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from kernodeck._fs import sha256_file, write_atomic
from kernodeck.runformat import manifest as dossier_manifest
from tests.helpers.project import copy_project, kd

MANIFEST = "dossier/reference/manifest.toml"


def _write(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["id"] = dossier_manifest.identity(manifest)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dossier_manifest.render(manifest))
    return manifest


def _verify(project: Path, out: Path) -> tuple[dict[str, Any], str]:
    proc = kd(project, "verify", "--python", sys.executable, "--out", str(out))
    assert proc.returncode in (1, 2) and (out / "report.json").is_file(), proc.stderr[-2000:]
    differs = (out / "report.md").read_text(encoding="utf-8").split("## What differs from the reference", 1)[1]
    return json.loads((out / "report.json").read_text(encoding="utf-8")), differs.split("\n## ", 1)[0]


def test_verify_names_another_lock_and_a_rollback_to_an_older_reference(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")  # its history/ is not copied: the test writes its own
    path = project / MANIFEST
    current = tomllib.loads(path.read_text(encoding="utf-8"))
    # the control: a reference made with the lock this verify checks (set here, whatever the committed one records),
    # nothing newer
    lock = "sha256:" + sha256_file(project / "lockfiles" / "cp311-linux_x86_64-cpu.txt")
    current["environment"]["lock_digest"] = lock
    current = _write(path, current)
    report, differs = _verify(project, tmp_path / "plain")
    lineage = report["reference_lineage"]
    assert lineage["id"] == current["id"] and lineage["lock_digest"] == lock == report["lock_digest"]
    assert lineage["differences"] == [] and "another lock" not in differs and "rolled back" not in differs

    # the reference in use made with another lock than the one verify checks
    current["environment"]["lock_digest"] = "sha256:" + "d" * 64
    current = _write(path, current)
    # and a newer one (made after it, from it) kept in history: the older one back in use is a rollback
    newer = json.loads(json.dumps(current))
    newer["environment"]["lock_digest"] = "sha256:" + "e" * 64
    newer["provenance"]["previous_id"] = current["id"]
    newer["provenance"]["created"] = "2099-01-01T00:00:00+00:00"  # made after it
    newer["id"] = dossier_manifest.identity(newer)
    newer = _write(project / "dossier/reference/history" / newer_slug(newer) / "manifest.toml", newer)

    report, differs = _verify(project, tmp_path / "rolled")
    lineage = report["reference_lineage"]
    assert [m["id"] for m in lineage["newer_in_history"]] == [newer["id"]]
    assert f"- the reference was made with another lock: sha256:{'d' * 64} (this run's lock: {lock})" in differs
    made_later = f"({newer['id']}, made 2099-01-01T00:00:00+00:00)"
    assert f"- the reference is older than history/{newer_slug(newer)} {made_later}: rolled back" in differs
    head = (tmp_path / "rolled" / "report.md").read_text(encoding="utf-8").split("## Claims", 1)[0]
    created = current["provenance"].get("created")
    made = f"made {created}" if created else "made at a date not recorded"
    assert f"- reference lineage: `{current['id']}`, {made}, with lock `sha256:{'d' * 64}`" in head

    # the reference just replaced, put back: `reference --new` kept it in history; the newer one is kept nowhere
    history = project / "dossier/reference/history"
    (history / newer_slug(newer) / "manifest.toml").unlink()
    (history / newer_slug(newer)).rmdir()
    _write(history / newer_slug(current) / "manifest.toml", json.loads(json.dumps(current)))
    report, differs = _verify(project, tmp_path / "put-back")
    assert report["reference_lineage"]["newer_in_history"] == []
    assert f"- the reference in use is history/{newer_slug(current)}: a newer reference replaced it and it was put " \
        "back (rolled back to an older reference)" in differs


def newer_slug(manifest: dict[str, Any]) -> str:
    return str(manifest["id"]).replace(":", "-")
