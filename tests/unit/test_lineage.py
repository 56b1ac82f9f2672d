"""The reference's lineage (kernodeck/runformat/lineage.py): the lock it was made with against this run's, and a newer
reference in its history (a rollback), each named; each rule with the case where it must stay silent."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kernodeck.dossier import new_reference
from kernodeck.runformat import lineage
from kernodeck.runformat.manifest import Reference, identity, render

LOCK, OTHER = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def _manifest(name: str, previous: str = "", lock: str = LOCK, created: str = "") -> dict[str, Any]:
    """A minimal manifest whose content (and so its id) differs by ``name``."""
    manifest: dict[str, Any] = {
        "format": 2,
        "application": {"entry": "app.py:run", "params": {"name": name}},
        "environment": {"platform": "cp311-linux_x86_64-cpu", "lock_digest": lock},
        "provenance": {"commit": "c", "dirty": False, "previous_id": previous,
                       **({"created": created} if created else {})},
    }
    manifest["id"] = identity(manifest)
    return manifest


def _keep(folder: Path, manifest: dict[str, Any]) -> None:
    entry = folder / "history" / str(manifest["id"]).replace(":", "-")
    entry.mkdir(parents=True)
    (entry / "manifest.toml").write_text(render(manifest), encoding="utf-8")


def _lineage(folder: Path, current: dict[str, Any], lock: str = LOCK) -> lineage.Lineage:
    return lineage.lineage(Reference(folder, current), lock)


def test_a_reference_made_with_another_lock_is_named(tmp_path: Path) -> None:
    current = _manifest("a")
    assert _lineage(tmp_path, current).differences() == []  # the control: the same lock, nothing to name
    found = _lineage(tmp_path, current, OTHER)
    assert found.differences() == [f"the reference was made with another lock: {LOCK} (this run's lock: {OTHER})"]
    assert found.as_dict()["lock_digest"] == LOCK and found.as_dict()["this_run_lock_digest"] == OTHER
    unrecorded = _manifest("a", lock="")
    assert _lineage(tmp_path, unrecorded).differences() == [
        "the reference records no lock digest: the lock it was made with cannot be compared"]


def test_a_rollback_to_an_older_history_manifest_is_named_by_the_chain(tmp_path: Path) -> None:
    """No dates (references made before they were recorded): B's previous is A, so A in use is a rollback."""
    a = _manifest("a")
    b = _manifest("b", previous=a["id"], lock=OTHER)
    _keep(tmp_path, a)
    _keep(tmp_path, b)
    found = _lineage(tmp_path, a)
    assert [m.id for m in found.newer] == [b["id"]]
    slug, mine = str(b["id"]).replace(":", "-"), str(a["id"]).replace(":", "-")
    assert found.differences() == [
        f"the reference in use is history/{mine}: a newer reference replaced it and it was put back (rolled back to "
        "an older reference)",
        f"the reference is older than history/{slug} ({b['id']}): rolled back to an older reference"]
    # the control: B in use, A (only) in its history, is the normal order
    normal = tmp_path / "normal"
    _keep(normal, a)
    assert _lineage(normal, b, OTHER).differences() == []


def test_a_reference_made_again_with_older_content_is_not_a_rollback(tmp_path: Path) -> None:
    """A -> B -> A again (`reference --new` on reverted code: the same id, its previous is B): not rolled back."""
    a = _manifest("a")
    b = _manifest("b", previous=a["id"])
    _keep(tmp_path, a)
    _keep(tmp_path, b)
    again = _manifest("a", previous=b["id"])
    assert again["id"] == a["id"]
    assert _lineage(tmp_path, again).newer == ()


def test_the_reference_just_replaced_put_back_is_a_rollback(tmp_path: Path) -> None:
    """A -> B (`reference --new`: A kept in history), then A's folder copied back over B's: B is in no history, yet the
    manifest in use is history's A, provenance and all: named. A made again with A's content is not (red-team 10)."""
    a = _manifest("a", created="2026-11-01T10:00:00+00:00")
    _keep(tmp_path, a)  # B replaced it; B itself is kept nowhere
    found = _lineage(tmp_path, a)
    slug = str(a["id"]).replace(":", "-")
    assert found.newer == () and found.as_dict()["replaced_and_put_back"] == f"history/{slug}"
    assert found.differences() == [f"the reference in use is history/{slug}: a newer reference replaced it and it was "
                                   "put back (rolled back to an older reference)"]
    # the controls: the same content made again (a later date, A as its predecessor); a reference not in history
    again = _manifest("a", previous=a["id"], created="2026-11-20T10:00:00+00:00")
    assert again["id"] == a["id"] and _lineage(tmp_path, again).differences() == []
    assert _lineage(tmp_path, _manifest("b", previous=a["id"])).differences() == []


def test_dates_decide_where_both_are_recorded(tmp_path: Path) -> None:
    """A history entry made later than the reference in use, with no chain between them: still named."""
    current = _manifest("a", created="2026-11-01T10:00:00+00:00")
    later = _manifest("b", created="2026-11-20T10:00:00+00:00")
    earlier = _manifest("c", created="2026-10-01T10:00:00+00:00")
    _keep(tmp_path, later)
    _keep(tmp_path, earlier)
    found = _lineage(tmp_path, current)
    assert [m.id for m in found.newer] == [later["id"]]
    assert ", made 2026-11-20T10:00:00+00:00): rolled back" in found.differences()[0]


def test_a_history_entry_whose_id_does_not_match_its_content_counts_for_nothing(tmp_path: Path) -> None:
    a = _manifest("a")
    forged = _manifest("b", previous=a["id"])
    forged["application"]["params"]["name"] = "edited"  # its id no longer matches
    _keep(tmp_path, forged)
    assert lineage.history(tmp_path) == [] and _lineage(tmp_path, a).newer == ()


def test_the_report_names_the_lineage_and_its_differences() -> None:
    from kernodeck.verify.markdown import render_markdown
    from kernodeck.verify.report import Report

    a = _manifest("a")
    older = lineage.Made.of(_manifest("b", previous=a["id"], created="2026-11-20T10:00:00+00:00"), "history/x")
    record = lineage.Lineage(lineage.Made.of(a, "current"), (older,), OTHER).as_dict()
    text = render_markdown(Report("cp311-linux_x86_64-cpu", [], {"reference_lineage": record}))
    assert f"- reference lineage: `{a['id']}`, made at a date not recorded, with lock `{LOCK}`" in text
    differs = text.split("## What differs from the reference", 1)[1].split("##", 1)[0]
    assert f"- the reference was made with another lock: {LOCK} (this run's lock: {OTHER})" in differs
    assert "- the reference is older than history/x" in differs
    plain = render_markdown(Report("cp311-linux_x86_64-cpu", [], {}))
    assert "reference lineage" not in plain and "rolled back" not in plain


# --- through reference --new's writer (new_reference.install), as red-team pass 11 tried it -------------------------


def _written(name: str, previous: str = "", created: str = "") -> dict[str, Any]:
    """A manifest as reference --new writes it: one output (x.npy, ids.json) whose bytes differ by ``name``."""
    data, ids = name.encode() * 8, json.dumps([name])
    manifest: dict[str, Any] = {
        "format": 2,
        "application": {"entry": "app.py:run", "params": {"name": name}},
        "outputs": {"x": {"file": "x.npy", "sha256": hashlib.sha256(data).hexdigest(), "ids": "ids.json",
                          "ids_sha256": hashlib.sha256(ids.encode()).hexdigest()}},
        "environment": {"platform": "cp311-linux_x86_64-cpu", "lock_digest": LOCK},
        "provenance": {"commit": "c", "dirty": False, "previous_id": previous, "created": created},
    }
    manifest["id"] = identity(manifest)
    return manifest


def _new(folder: Path, tmp: Path, manifest: dict[str, Any]) -> None:
    name = str(manifest["application"]["params"]["name"])
    outputs = tmp / f"out-{name}-{manifest['provenance']['created']}"
    outputs.mkdir(parents=True)
    (outputs / "x.npy").write_bytes(name.encode() * 8)
    (outputs / "ids.json").write_text(json.dumps([name]), encoding="utf-8")
    new_reference.install(SimpleNamespace(reference=folder), manifest, outputs,  # type: ignore[arg-type]
                          {"inventory": "inventory\n", "system": json.dumps({"system": name}) + "\n"})


def _named(folder: Path) -> list[str]:
    current = tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))
    return lineage.lineage(Reference(folder, current), LOCK).differences()


def test_a_reference_made_again_is_kept_so_a_rollback_to_it_is_named(tmp_path: Path) -> None:
    """A, B, A' (A's content made again), B': A' was not kept (history/<A's id> held A already), so restoring A' named
    nothing (red-team pass 11). A' is kept beside A now; the put-back is named; the normal order stays silent."""
    ref = tmp_path / "reference"
    a = _written("a", created="2026-11-01T10:00:00+00:00")
    b = _written("b", previous=a["id"], created="2026-11-02T10:00:00+00:00")
    again = _written("a", previous=b["id"], created="2026-11-03T10:00:00+00:00")
    for made in (a, b, again):
        _new(ref, tmp_path, made)
    assert _named(ref) == []  # the control: A made again is not a rollback
    committed = {name: (ref / name).read_bytes() for name in ("manifest.toml", "x.npy", "ids.json")}
    _new(ref, tmp_path, _written("b", previous=again["id"], created="2026-11-04T10:00:00+00:00"))
    assert _named(ref) == []
    slug = str(a["id"]).replace(":", "-")
    assert sorted(p.name for p in (ref / "history").iterdir()) == sorted(
        [slug, f"{slug}-2", str(b["id"]).replace(":", "-")])
    for name, data in committed.items():  # A' restored from its commit
        (ref / name).write_bytes(data)
    assert _named(ref) == [f"the reference in use is history/{slug}-2: a newer reference replaced it and it was put "
                           "back (rolled back to an older reference)"]
    # the put-back A' replaced again: it is in history already, under -2 (no copy of it as -3); an entry without its
    # manifest (a folder left half-copied) is no match and no crash
    (ref / "history" / f"{slug}-3").mkdir()
    _new(ref, tmp_path, _written("c", previous=again["id"], created="2026-11-05T10:00:00+00:00"))
    assert sorted(p.name for p in (ref / "history").iterdir()) == sorted(
        [slug, f"{slug}-2", f"{slug}-3", str(b["id"]).replace(":", "-")])
    assert not (ref / "history" / f"{slug}-3" / "manifest.toml").exists()
