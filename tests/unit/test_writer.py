"""The dossier writer's review (kernodeck/verify/writer.py): every text file scrubbed with the secrets read once into
the run context, then scanned; a value left fails the write and the file is removed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck import sources
from kernodeck.runformat import review as review_mod
from kernodeck.verify import writer

TOKEN = "QTOKEN42"
QUERY_URL = f"https://idx.example.com/simple?access_token={TOKEN}"


@pytest.fixture
def staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A staged dossier of a project, on a machine whose only source is an index URL holding a token."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", QUERY_URL)
    monkeypatch.chdir(tmp_path)
    project = SimpleNamespace(root=tmp_path / "project", variants={})
    folder = tmp_path / "staging"
    (folder / "outputs").mkdir(parents=True)
    (folder / "outputs" / "embeddings.npy").write_bytes(b"\x93NUMPY " + TOKEN.encode())  # binary: left as it is
    return SimpleNamespace(project=project, staging=folder, secrets=sources.secrets([]))


def test_review_scrubs_sources_and_paths(staged: Any) -> None:
    report = staged.staging / "report.md"
    report.write_text(f"installed from {QUERY_URL} in {staged.project.root}/x\n", encoding="utf-8")
    writer.review(staged)
    text = report.read_text(encoding="utf-8")
    assert TOKEN not in text and "<project>/x" in text and str(staged.project.root) not in text
    assert TOKEN.encode() in (staged.staging / "outputs" / "embeddings.npy").read_bytes()


def test_a_secret_the_scrub_misses_fails_the_write(staged: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: with a scrub that misses it, the scan still refuses the file and removes it."""
    report = staged.staging / "report.md"
    report.write_text(f"token {TOKEN}\n", encoding="utf-8")
    monkeypatch.setattr(review_mod, "scrub_text", lambda text, *args, **kwargs: text)
    with pytest.raises(sources.SecretInText):
        writer.review(staged)
    assert not report.exists()


def _with_lock(staged: Any, raw: str) -> Any:
    staged.lock = SimpleNamespace(raw=raw.encode("utf-8"), parsed=None, twin=None, twin_path=None, digest="0" * 64,
                                  path=staged.project.root / "lockfiles" / "x.txt")
    return staged


def test_the_lock_files_are_reviewed_while_the_checks_run(staged: Any) -> None:
    raw = f"# installed from {QUERY_URL}\n# in {staged.project.root}/lockfiles\ntorch==2.13.0\n"
    texts = writer.LockFiles(_with_lock(staged, raw), "cp311-linux_x86_64-cpu").texts()
    assert texts == {"lock.txt": writer._reviewer(staged)(raw)}  # as the dossier's review would leave the file
    assert TOKEN not in texts["lock.txt"] and "<project>/lockfiles" in texts["lock.txt"]


def test_deferred_lock_files_start_when_told_and_render_anyway_when_never_started(staged: Any) -> None:
    """start=False: no thread runs until start() (the in-env phase's); a run that never reached it still gets the
    same reviewed texts from texts(); a second start() does nothing."""
    raw = f"# installed from {QUERY_URL}\ntorch==2.13.0\n"
    expected = {"lock.txt": writer._reviewer(staged)(raw)}
    never = writer.LockFiles(_with_lock(staged, raw), "cp311-linux_x86_64-cpu", start=False)
    assert never._thread.ident is None  # control: nothing rendered before start()
    assert never.texts() == expected
    told = writer.LockFiles(_with_lock(staged, raw), "cp311-linux_x86_64-cpu", start=False)
    told.start()
    told.start()
    assert told.texts() == expected


def test_a_secret_left_in_the_lock_files_is_the_dossiers_review_to_refuse(staged: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: a scrub that misses it gives no prepared text; the dossier writes the raw lock, and its own
    review refuses the file and removes it."""
    monkeypatch.setattr(review_mod, "scrub_text", lambda text, *args, **kwargs: text)
    ctx = _with_lock(staged, f"# token {TOKEN}\n")
    assert writer.LockFiles(ctx, "cp311-linux_x86_64-cpu").texts() == {}
    (staged.staging / "lock.txt").write_bytes(ctx.lock.raw)
    with pytest.raises(sources.SecretInText):
        writer.review(staged)
    assert not (staged.staging / "lock.txt").exists()


def test_only_the_files_written_from_reviewed_text_skip_the_review(staged: Any) -> None:
    for name in ("lock.txt", "report.md"):
        (staged.staging / name).write_text(f"from {QUERY_URL}\n", encoding="utf-8")
    writer.review(staged, ["lock.txt"])  # as if lock.txt were written from LockFiles' text
    assert TOKEN in (staged.staging / "lock.txt").read_text(encoding="utf-8")  # not read again
    assert TOKEN not in (staged.staging / "report.md").read_text(encoding="utf-8")


def test_the_sbom_prepared_meanwhile_is_the_one_written_after(staged: Any) -> None:
    from kernodeck.lock import lockfile
    from kernodeck.lock import twin as lock_twin
    from kernodeck.runformat import sbom
    from tests.helpers.project import ROOT

    lock_path = ROOT / "lockfiles" / "cp311-linux_x86_64-cpu.txt"
    twin_path = lock_path.with_name(f"pylock.{lock_path.stem}.toml")
    raw = lock_path.read_bytes()
    staged.lock = SimpleNamespace(raw=raw, parsed=lockfile.read(lock_path), path=lock_path, twin_path=twin_path,
                                  twin=lock_twin.read(twin_path), digest="sha256:" + hashlib.sha256(raw).hexdigest())
    texts = writer.LockFiles(staged, lock_path.stem).texts()
    written = sbom.write(lock_path, lock_path.stem, staged.staging / "after.cdx.json", twin_path,
                         lock=staged.lock.parsed, digest=staged.lock.digest, twin=staged.lock.twin)
    assert texts[writer.SBOM] == writer._reviewer(staged)(written.read_text(encoding="utf-8"))
    assert texts["lock.txt"] == writer._reviewer(staged)(raw.decode("utf-8"))


def test_the_system_record_holds_the_zone_files_the_application_read_and_a_change_is_named(tmp_path: Path) -> None:
    """system.json carries the time zone database files the application read (their sha256), so each is compared with
    the reference's as the system chain's (red-team pass 52, TZ1); a run that read none carries no such key."""
    import json

    from kernodeck.inenv.protocol import Status as StepStatus
    from kernodeck.runformat.refdelta import vs_reference
    from kernodeck.verify.record import Step

    system = Step("system", StepStatus.PASSED, details={"os": "Debian"})
    read = Step("application", StepStatus.PASSED, details={"system_files": {"/usr/share/zoneinfo/UTC": "a" * 64}})
    assert writer._system_record({"system": system}) == {"os": "Debian"}
    record = writer._system_record({"system": system, "application": read})
    assert record == {"os": "Debian", "system_files": {"/usr/share/zoneinfo/UTC": "a" * 64}}
    for name, files in (("reference", {"/usr/share/zoneinfo/UTC": "b" * 64}), ("run", record["system_files"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "system.json").write_text(json.dumps({"os": "Debian", "system_files": files}))
    found = vs_reference(tmp_path / "reference", tmp_path / "run")["system"]
    assert found == {"system_files./usr/share/zoneinfo/UTC": {"reference": "b" * 64, "this run": "a" * 64}}
