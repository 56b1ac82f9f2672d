"""Nothing lost (issue 19, item 5): Kernodeck removes or replaces only what it wrote.

A folder Kernodeck writes lists its own files (``.kernodeck-folder``: relative path + sha256, written last); a reuse
of that ``--out`` with anything else in it, or a listed file changed since, is refused with one ERROR naming the
files, and nothing is removed. A single file ``--out`` (the matrix) is replaced only when its sidecar record says
Kernodeck wrote it, unchanged. Each case runs what a user runs (``python -m kernodeck ...`` in a project copy).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernodeck import outdir
from kernodeck.errors import UnsafeOut
from tests.helpers.outfolders import lockless, refused, snapshot
from tests.helpers.project import copy_project, kd

rel = pytest.mark.reliability


def dossier_of(project: Path, out: Path) -> dict[str, bytes]:
    """A real (failed, fast: no lockfile) verify's dossier at ``out``; its files as they are now."""
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 2 and "no lockfile" in proc.stderr, proc.stderr
    listing = json.loads((out / outdir.MARKER).read_text())
    assert listing["made_by"] == "kernodeck" and listing["version"] == outdir.MARKER_VERSION
    assert "report.json" in listing["files"] and listing["files"]["report.json"].startswith("sha256:")
    return snapshot(out)


@rel(
    70,
    "a user's notebook and figures added into an earlier dossier folder, then `verify --out` there again",
    "refused with one ERROR naming them and a TIP; the notebook, the figures and the dossier unchanged",
)
def test_user_files_added_to_a_dossier_are_never_removed(tmp_path: Path) -> None:
    project = lockless(tmp_path)
    out = tmp_path / "run"
    dossier_of(project, out)
    (out / "analysis.ipynb").write_text('{"cells": []}\n')
    (out / "figures").mkdir()
    for i in range(8):
        (out / "figures" / f"fig{i}.png").write_bytes(b"\x89PNG" + bytes([i]))
    (out / "report-notes.md").write_text("mine\n")
    before = snapshot(out)
    proc = kd(project, "verify", "--out", str(out))
    refused(proc, "--out", "analysis.ipynb", "figures/", "report-notes.md", "nothing removed")
    assert "3 entries" in proc.stderr and "move those files out" in proc.stderr
    assert snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run")] == []  # no staging left beside


@rel(
    71,
    "a file of an earlier dossier edited by hand (report.md annotated), then `verify --out` there again",
    "refused: the ERROR names report.md as changed since Kernodeck wrote it; the edit kept",
)
def test_an_edited_dossier_file_is_not_replaced(tmp_path: Path) -> None:
    project = lockless(tmp_path)
    out = tmp_path / "run"
    dossier_of(project, out)
    with (out / "report.md").open("a") as handle:
        handle.write("\nMy notes on this run.\n")
    before = snapshot(out)
    refused(kd(project, "verify", "--out", str(out)), "report.md (changed since Kernodeck wrote it)")
    assert snapshot(out) == before


@rel(
    72,
    "a hand-made `.kernodeck-folder` marker (empty, the old one-line format, or listing other files) in a folder "
    "of user files, then `verify --out` / `compare --out` there",
    "refused: the marker is not trusted, the ERROR names the files; nothing removed",
)
@pytest.mark.parametrize(
    "marker",
    [
        "",
        '{"made_by": "kernodeck", "kind": "dossier"}\n',
        json.dumps({"made_by": "kernodeck", "version": 2, "kind": "dossier", "files": {"thesis.tex": "sha256:00"}}),
    ],
    ids=["empty", "old-format", "wrong-digests"],
)
@pytest.mark.parametrize("command", ["verify", "compare"])
def test_a_hand_made_marker_is_not_trusted(tmp_path: Path, marker: str, command: str) -> None:
    project = lockless(tmp_path)
    user = tmp_path / "thesis"
    user.mkdir()
    (user / outdir.MARKER).write_text(marker)
    (user / "thesis.tex").write_text("\\begin{document}\n")
    (user / "data").mkdir()
    (user / "data" / "table.csv").write_text("a,b\n")
    before = snapshot(user)
    lead = ["compare", str(tmp_path / "a"), str(tmp_path / "b")] if command == "compare" else [command]
    for folder in (tmp_path / "a", tmp_path / "b"):
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}))
    proc = kd(project, *lead, "--out", str(user))
    refused(proc, "--out", "thesis.tex", "data/")
    assert snapshot(user) == before


@rel(
    73,
    "`matrix --out notes.txt` over a user's file (and over a file beside a made-up sidecar record)",
    "refused with one ERROR + TIP; the file byte for byte as it was",
)
def test_matrix_never_overwrites_a_user_file(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    refused(kd(project, "matrix", "--out", str(notes)), "--out", "did not write")
    assert notes.read_text() == "my notes\n"
    # a sidecar made by hand does not make the file Kernodeck's: its digest must match
    (tmp_path / f".notes.txt{outdir.FILE_SUFFIX}").write_text(
        json.dumps({"made_by": "kernodeck", "kind": "matrix", "sha256": "sha256:0"})
    )
    refused(kd(project, "matrix", "--out", str(notes)), "changed since Kernodeck wrote it")
    assert notes.read_text() == "my notes\n"


@rel(
    74,
    "`matrix --out m.json` over its own earlier file; then over it once the user edited it",
    "its own file replaced (the new matrix in it); the edited one refused and kept",
)
def test_matrix_replaces_only_its_own_untouched_file(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    out = tmp_path / "m.json"
    first = kd(project, "matrix", "--out", str(out))
    assert first.returncode == 0, first.stderr
    assert json.loads(out.read_text())["include"] and outdir.file_is_ours(out)
    out.write_text("{}\n")  # stands for an earlier matrix: other content, recorded as Kernodeck's
    outdir.write_file(out, "{}\n", "matrix")
    again = kd(project, "matrix", "--out", str(out), "--hosted-only")
    assert again.returncode == 0, again.stderr
    assert json.loads(out.read_text()) == json.loads(again.stdout.strip().splitlines()[-1])
    out.write_text(out.read_text().replace("include", "include_edited"))
    edited = out.read_text()
    refused(kd(project, "matrix", "--out", str(out)), "changed since Kernodeck wrote it")
    assert out.read_text() == edited


@rel(
    75,
    "a clean re-run over Kernodeck's own untouched dossier (and compare's own output), twice",
    "accepted and replaced whole: the new listing names the new files; no staging or parked folder left",
)
def test_kernodecks_own_untouched_folders_are_replaced(tmp_path: Path) -> None:
    project = lockless(tmp_path)
    out = tmp_path / "run"
    dossier_of(project, out)
    for _ in range(2):
        inode = (out / "report.json").stat().st_ino
        dossier_of(project, out)
        assert (out / "report.json").stat().st_ino != inode and outdir.foreign(out) == []
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}))
    for _ in range(2):
        proc = kd(project, "compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
        assert proc.returncode == 0, proc.stderr
    listing = json.loads((tmp_path / "cmp" / outdir.MARKER).read_text())
    assert listing["kind"] == "compare" and set(listing["files"]) == {"compare.md", "compare.json"}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@rel(
    76,
    "`verify --out` over a dossier an earlier Kernodeck wrote (report.json + report.md, no listing of its files), "
    "with the user's notebook in it",
    "refused: without a list, nothing in it is known to be Kernodeck's; every file kept",
)
def test_an_unlisted_old_dossier_is_not_replaced(tmp_path: Path) -> None:
    project = lockless(tmp_path)
    old = tmp_path / "old"
    old.mkdir()
    (old / "report.json").write_text(json.dumps({"version": 1, "status": "passed", "platform": "p", "steps": []}))
    (old / "report.md").write_text("# old\n")
    (old / "notebook.ipynb").write_text("{}\n")
    before = snapshot(old)
    refused(kd(project, "verify", "--out", str(old)), "no .kernodeck-folder lists them", "notebook.ipynb")
    assert snapshot(old) == before


# --- the rule itself, in process ------------------------------------------------------------------------------------


def test_a_file_put_into_the_folder_during_the_run_is_kept(tmp_path: Path) -> None:
    """Checked again at the swap: a file added while the run was writing its staging folder is not lost."""
    final = tmp_path / "run"
    with outdir.staged(final, "dossier") as staging:
        (staging / "report.json").write_text("1")
    with pytest.raises(UnsafeOut, match=r"late\.txt"), outdir.staged(final, "dossier") as staging:
        (staging / "report.json").write_text("2")
        (final / "late.txt").write_text("the user's")
    assert (final / "late.txt").read_text() == "the user's" and (final / "report.json").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # staging removed, nothing parked


def test_staged_cleans_up_on_error_and_leaves_the_earlier_folder(tmp_path: Path) -> None:
    final = tmp_path / "run"
    with outdir.staged(final, "compare") as staging:
        (staging / "a").write_text("1")
    with pytest.raises(RuntimeError), outdir.staged(final, "compare") as staging:
        (staging / "a").write_text("2")
        raise RuntimeError("boom")
    assert (final / "a").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert outdir.foreign(final) == []


def test_foreign_names_added_changed_and_links(tmp_path: Path) -> None:
    final = tmp_path / "run"
    with outdir.staged(final, "dossier") as staging:
        (staging / "steps").mkdir()
        (staging / "steps" / "01.json").write_text("{}")
        (staging / "report.md").write_text("r")
    assert outdir.foreign(final) == []
    (final / "steps" / "01.json").write_text("{ }")
    (final / "link").symlink_to(tmp_path)
    (final / "empty").mkdir()
    (final / "report.md").unlink()
    assert outdir.foreign(final) == [
        "empty/",
        "link",
        "steps/01.json (changed since Kernodeck wrote it)",
        "report.md (missing)",
    ]
    # a listed file the user removed loses nothing of theirs: not a reason to refuse
    (final / "steps" / "01.json").write_text("{}")
    (final / "link").unlink()
    (final / "empty").rmdir()
    assert outdir.check(final, what="the dossier", tip="t") == final.resolve()


def test_a_marker_cannot_list_paths_outside_its_folder(tmp_path: Path) -> None:
    final = tmp_path / "run"
    final.mkdir()
    (final / outdir.MARKER).write_text(
        json.dumps({"made_by": "kernodeck", "version": 2, "kind": "x", "files": {"../x": "sha256:0"}})
    )
    assert outdir.foreign(final) == [outdir.MARKER]
    with pytest.raises(UnsafeOut, match="is not one Kernodeck wrote"):
        outdir.check(final, what="the dossier", tip="t")
