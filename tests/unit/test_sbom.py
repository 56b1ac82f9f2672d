"""Supply-chain records: a CycloneDX SBOM per platform lock (schema-validated offline) and an honest audit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kernodeck.lock import audit, lockfile
from kernodeck.project.config import load_project
from kernodeck.runformat import sbom
from tests.helpers.project import ROOT, copy_project, kd
from tests.helpers.sbomcheck import errors

LOCKS = sorted(p for p in (ROOT / "lockfiles").glob("*.txt"))


def _document(lock: Path) -> dict[str, Any]:
    platform = lock.stem
    twin = lock.with_name(f"pylock.{platform}.toml")
    return sbom.build(lock, platform, twin if twin.exists() else None)


@pytest.mark.parametrize("lock", LOCKS, ids=[p.stem for p in LOCKS])
def test_sbom_of_each_committed_lock_is_valid_cyclonedx(lock: Path) -> None:
    document = _document(lock)
    assert errors(document) == []
    assert document["specVersion"] == "1.6" and document["bomFormat"] == "CycloneDX"


@pytest.mark.parametrize("lock", LOCKS, ids=[p.stem for p in LOCKS])
def test_sbom_names_every_pin_with_purl_and_every_hash_once(lock: Path) -> None:
    from packageurl import PackageURL

    document = _document(lock)
    pins = lockfile.read(lock).pins
    assert len(document["components"]) == len(pins)
    by_name = {(c["name"], c["version"]): c for c in document["components"]}
    for pin in pins:
        component = by_name[(pin.name, pin.version)]
        parsed = PackageURL.from_string(component["purl"])
        assert (parsed.type, parsed.name, parsed.version) == ("pypi", pin.name, pin.version)
        listed = [h["content"] for h in component.get("hashes", [])]
        listed += [h["content"] for ref in component.get("externalReferences", []) for h in ref["hashes"]]
        assert sorted(listed) == sorted(h.removeprefix("sha256:") for h in pin.hashes)
        for ref in component.get("externalReferences", []):
            assert ref["type"] == "distribution" and ref["url"].startswith("https://")
    # the PEP 751 twin places every file: no hash is left without its URL
    assert not any("hashes" in c for c in document["components"])


def test_sbom_is_the_same_bytes_for_the_same_lock(tmp_path: Path) -> None:
    lock = LOCKS[0]
    first = sbom.render(_document(lock))
    assert first == sbom.render(_document(lock))
    changed = tmp_path / lock.name
    changed.write_text(lockfile.seal(lock.read_text(encoding="utf-8") + "\n"), encoding="utf-8")  # resealed
    assert sbom.build(changed, lock.stem)["serialNumber"] != json.loads(first)["serialNumber"]


def test_sbom_from_what_the_caller_read_is_the_same_and_reads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verify's run context passes the lock, its digest and its twin it already read: the same document, no read."""
    from kernodeck._fs import sha256_file
    from kernodeck.lock import twin as lock_twin

    lock_path = LOCKS[0]
    twin_path = lock_path.with_name(f"pylock.{lock_path.stem}.toml")
    expected = sbom.render(_document(lock_path))
    lock, digest, twin = lockfile.read(lock_path), "sha256:" + sha256_file(lock_path), lock_twin.read(twin_path)

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("read again")

    monkeypatch.setattr(lockfile, "read", no_read)
    monkeypatch.setattr(lock_twin, "read", no_read)  # where sbom reads the twin from (the call's own import)
    monkeypatch.setattr(sbom, "sha256_file", no_read)
    given = sbom.write(lock_path, lock_path.stem, tmp_path / "x.cdx.json", twin_path, lock=lock, digest=digest,
                       twin=twin)
    assert given.read_text(encoding="utf-8") == expected
    # negative control: another digest is another SBOM (the digest given is the one used)
    other = sbom.build(lock_path, lock_path.stem, twin_path, lock=lock, digest="0" * 64, twin=twin)
    assert other["serialNumber"] != json.loads(expected)["serialNumber"]
    with pytest.raises(AssertionError, match="read again"):  # nothing given: it reads (here, the guard fires)
        sbom.build(lock_path, lock_path.stem)

@pytest.mark.parametrize(
    ("damage", "where"),
    [
        (lambda d: d["components"][0]["externalReferences"][0]["hashes"][0].update(alg="sha256"), "alg"),
        (lambda d: d["components"][0].update(type="python-package"), "type"),
        (lambda d: d.update(bomFormat="SPDX"), "bomFormat"),
    ],
)
def test_schema_check_fails_on_a_broken_sbom(damage: Any, where: str) -> None:
    """Negative control: the validator is not a rubber stamp."""
    document = _document(LOCKS[0])
    damage(document)
    found = errors(document)
    assert found and any(where in e for e in found), found


def test_purl_escapes_local_versions_and_names_a_foreign_index() -> None:
    assert sbom.purl("Torch", "2.13.0+cpu", "https://download.pytorch.org/whl/cpu/") == (
        "pkg:pypi/torch@2.13.0%2Bcpu?repository_url=https://download.pytorch.org/whl/cpu"
    )
    plain = sbom.purl("Sentence_Transformers", "5.0.0", "https://pypi.org/simple")
    assert plain == "pkg:pypi/sentence-transformers@5.0.0"


def test_sbom_command_writes_one_per_committed_lock(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    out = tmp_path / "sboms"
    proc = kd(project, "sbom", "--all", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert written == sorted(f"{p.stem}.cdx.json" for p in LOCKS)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [f".{name}.kernodeck-file"
                                                                               for name in written]
    for name in written:
        assert errors(json.loads((out / name).read_text(encoding="utf-8"))) == []
    assert len(load_project(project).platforms) > len(written)  # a declared platform without a lock: none made


# --- audit: pip-audit's answers, and its silence, reported as they are ----------------------------------------------

FAKE_PIP_AUDIT = """
import json, sys
args = sys.argv[1:]
out = args[args.index("--output") + 1]
mode = {mode!r}
if mode == "offline":
    raise SystemExit("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='pypi.org', port=443): "
                     "Max retries exceeded (Caused by NewConnectionError: Connection refused)")
deps = {{
    "clean": [{{"name": "numpy", "version": "2.3.0", "vulns": []}}, {{"name": "x", "skip_reason": "not on PyPI"}}],
    "vulnerable": [{{"name": "numpy", "version": "2.3.0", "vulns": [{{"id": "PYSEC-1", "fix_versions": ["2.3.1"]}}]}}],
    "unknown": [{{"name": "x", "skip_reason": "Dependency not found on PyPI and could not be audited: x (1)"}}],
}}[mode]
json.dump({{"dependencies": deps, "fixes": []}}, open(out, "w"))
sys.exit(1 if mode == "vulnerable" else 0)
"""


@pytest.mark.parametrize(
    ("mode", "status", "line", "code"),
    [
        ("offline", audit.AuditStatus.NOT_CHECKED, "not checked: no network (", 3),
        ("unknown", audit.AuditStatus.NOT_CHECKED, "not checked: the vulnerability service knew none of the 1", 3),
        ("clean", audit.AuditStatus.CLEAN, "no known vulnerabilities in 1 package(s); 1 not checked", 0),
        ("vulnerable", audit.AuditStatus.VULNERABLE, "VULNERABLE: numpy==2.3.0 PYSEC-1 (fixed in 2.3.1)", 1),
    ],
)
def test_audit_reports_what_it_could_and_could_not_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, status: audit.AuditStatus, line: str, code: int
) -> None:
    fake = tmp_path / "fake" / "pip_audit"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("", encoding="utf-8")
    (fake / "__main__.py").write_text(FAKE_PIP_AUDIT.format(mode=mode), encoding="utf-8")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{fake.parent}" exec "{sys.executable}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", os.environ["PATH"])
    result = audit.audit_lock(LOCKS[0], "p", python=str(wrapper))
    assert result.status is status
    assert line in result.line()
    assert audit.exit_code([result]) == code


def test_sbom_out_that_is_a_file_is_one_error_and_tip(tmp_path: Path) -> None:
    """--out naming a file: ERROR + TIP, no traceback, the file untouched (red team, issue 29 point 8)."""
    project = copy_project(tmp_path / "project")
    out = tmp_path / "a-file"
    out.write_text("keep\n", encoding="utf-8")
    proc = kd(project, "sbom", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "ERROR:" in proc.stderr and "is a file, not a folder" in proc.stderr and "TIP: nox -s sbom" in proc.stderr
    assert out.read_text(encoding="utf-8") == "keep\n"
