"""Red-team pass 24 (issue 29's "PASSED means proven", e672e7a and its follow-ups: declared and source files held by
every name and each read's stat): each finding reproduced, marked ``xfail(strict=True)`` with its id while it stands
(a plain test once fixed), beside a control that passes today (notes: /work/notes/redteam24.md).

FP1 (sources held, FALSE PASS): the after-step hold (world.sources_held) asks read_since by each source NAME, but a
read's stat is recorded by the file it opens (declared_files.SEEN, keyed by realpath). A name that is not its own
realpath (every file of an hf snapshot: a link to its blob; a source under a linked folder) never finds its reads:
a file read, changed in place and put back before the step's end passes. Reads with no open event in the window
(an mmap'd weights file, torch.load(mmap=True); a handle kept from an earlier window) are only seen by that hold. A
plain file is caught (the control).
FP2 (forked child, FALSE PASS): a forked process (a DataLoader worker) records the stat of what it reads in its own
SEEN; its note to the parent says only "read". A file the child opened, changed in place before the child read it
and put back before the call ended, passes: the parent's judgement never saw that read's stat. In the parent the
same sequence fails (the control, pass 23's FP3 fix).
FP3 (sources held, FALSE PASS): a link of a source retargeted onto another of its files before the read and put back
after it: the read is recorded by the file it opened (b.csv, its own digest), the name read through (0.csv) is not
kept, and after the step the name resolves to a.csv again. Not put back, it fails (the control, pass 23's FP1 fix).
COST1 (forked child): world.moved builds ``{**source_files(ctx), **declared(ctx)}`` on every call; in a forked child
it is called for every file opened (_at_once), so a DataLoader worker reading every file of an N-file source pays
O(N) per read, O(N^2) per epoch.
NOTE1 (behaviour, not an xfail): a declared file read and then touched with no byte changed (an editor's save of an
unchanged buffer, os.utime, chmod by another process) fails the step: "changed during the run". Pinned by a plain test.
Held (run here): a source file read through a hard link no declaration names is undeclared (the step fails).
Fixed: FP1 (the after-step hold also checks every file read so far, by the file it opened), COST1 (world.moved looks
a path up in the declared files and the sources, never merging them per call), FP2 (a forked child hands each read's
stat to the parent: declared_files.take), FP3 (every link on the way to a declared name is
held by its identity for the run: links.py, after pass 25 found the first fix, names kept per read, incomplete;
the same in a forked child; a link the application made itself is its own). NOTE1 is stated in
docs/application.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import declared_files, locate, world
from kernodeck.inenv._common import CheckFailed, Context
from tests.helpers.closedworld import CRITERION, RELINK, TWICE, WAIT, edited_run

# --- the harness (pass 23's): the application step, the sources' check, then the after-step hold --------------------


def _application(tmp_path: Path, table_extra: dict[str, Any], entry: str, edit: str) -> dict[str, Any]:
    """The application step on ``entry`` (app.py's text), ``edit`` a module defining ``before()`` and ``after()`` run
    around the sources' check."""
    return edited_run(tmp_path, table_extra, entry, edit)


# --- FP1: a read's stat is not found by a name that is not its realpath (the after-step hold) ----------------------


def _hold_after_put_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, linked: bool) -> list[str]:
    """A weights source of one file, its name a link to a blob (an hf snapshot) or the plain file; the file read
    (its stat recorded as seen's open records it), changed in place, then put back; then the after-step hold."""
    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "kd"))
    monkeypatch.setattr(declared_files, "HASHED", {})
    monkeypatch.setattr(declared_files, "SEEN", {})
    where = tmp_path / "snapshot"
    where.mkdir()
    blob = tmp_path / "blobs" / "x0" if linked else where / "w.bin"
    blob.parent.mkdir(exist_ok=True)
    blob.write_bytes(b"weights 1")
    if linked:
        os.symlink(blob, where / "w.bin")
    root = tmp_path / "project"
    root.mkdir()
    (root / "sample.jsonl").write_text('{"id": "a"}\n')
    ctx = Context(
        config={"project_root": str(root), "application": {"sources": {}, "sample": "sample.jsonl"}},
        out=tmp_path / "out",
    )
    ctx.state.update(
        weights=str(where), weights_fingerprint=locate.fingerprint(where, remember=True), weights_version="unknown"
    )
    world.sources_held(ctx)  # held after the weights step
    declared_files.seen_now(os.path.realpath(where / "w.bin"))  # the entry opens it (seen._opened's record)
    blob.write_bytes(b"weights 2")  # in place (the mapping the entry holds now shows these bytes) ...
    blob.write_bytes(b"weights 1")  # ... and put back
    try:
        world.sources_held(ctx)
    except CheckFailed as exc:
        return list(exc.details["changed"])
    return []


def test_fp1_control_a_plain_source_file_read_changed_and_put_back_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _hold_after_put_back(tmp_path, monkeypatch, linked=False) != []


def test_fp1_a_linked_source_file_read_changed_and_put_back_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # was: [] (held), the file read with another stat than it has now
    assert _hold_after_put_back(tmp_path, monkeypatch, linked=True) != []


# --- FP2: a forked child's read, changed in place and put back ----------------------------------------------------

FORKED = (
    """import os, time
from pathlib import Path

"""
    + WAIT
    + """

def run(app):
    where = app.data["eval"] / "table.csv"
    if not {fork}:
        handle = open(where)
        _at({mark!r})
        value = int(handle.read())
        _at({mark2!r})
        app.write("x", [value], ["a"])
        return
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker: opens, then reads
        handle = open(where)
        _at({mark!r})
        os.write(w, handle.read().encode())
        _at({mark2!r})
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    value = int(os.read(r, 100))
    app.write("x", [value], ["a"])
"""
    + CRITERION
)


def _forked(tmp_path: Path, fork: bool) -> dict[str, Any]:
    source = tmp_path / "external"
    source.mkdir()
    file = source / "table.csv"
    file.write_text("1\n")
    mark, mark2 = str(tmp_path / "mark"), str(tmp_path / "mark2")
    return _application(
        tmp_path,
        {"data": {"eval": {"path": str(source)}}},
        FORKED.format(fork=fork, mark=mark, mark2=mark2),
        TWICE.format(
            first=f"open({str(file)!r}, 'w').write('2\\n')",  # in place, after the open, before the read
            second=f"open({str(file)!r}, 'w').write('1\\n')",  # put back after the read
            mark=mark,
            mark2=mark2,
        ),
    )


def test_fp2_control_in_the_parent_a_file_changed_after_its_open_and_put_back_fails(tmp_path: Path) -> None:
    result = _forked(tmp_path, fork=False)
    assert result["status"] == "failed" and "table.csv" in result["error"], result


def test_fp2_in_a_forked_child_a_file_changed_after_its_open_and_put_back_fails(tmp_path: Path) -> None:
    result = _forked(tmp_path, fork=True)
    # refused, or computed from the bytes the record names; was: passed, x = [2]
    assert result["status"] == "failed" or result["x"] == [1], result


# --- FP3: a link of a source retargeted before the read and put back after it -----------------------------------

LINKED = (
    """import os, time
from pathlib import Path

"""
    + WAIT
    + """

def run(app):
    _at({mark!r})
    value = int((app.weights / "0.csv").read_text())
    _at({mark2!r})
    app.write("x", [value], ["a"])
"""
    + CRITERION
)


def _relinked(tmp_path: Path, put_back: bool) -> dict[str, Any]:
    source = tmp_path / "models"
    source.mkdir()
    for name, value in (("a.csv", "1"), ("b.csv", "2")):
        (source / name).write_text(value + "\n")
    link = str(source / "0.csv")
    os.symlink("a.csv", link)
    mark, mark2 = str(tmp_path / "mark"), str(tmp_path / "mark2")
    return _application(
        tmp_path,
        {"weights": {"path": str(source)}},
        LINKED.format(mark=mark, mark2=mark2),
        TWICE.format(
            first=RELINK.format(to="b.csv", link=link),
            second=RELINK.format(to="a.csv", link=link) if put_back else "pass",
            mark=mark,
            mark2=mark2,
        ),
    )


def test_fp3_control_a_link_retargeted_and_left_fails(tmp_path: Path) -> None:
    result = _relinked(tmp_path, put_back=False)
    assert result["status"] == "failed" and "0.csv" in result["error"], result


def test_fp3_a_link_retargeted_for_the_read_and_put_back_fails(tmp_path: Path) -> None:
    result = _relinked(tmp_path, put_back=True)
    # refused, or computed from the bytes the record names (0.csv: a.csv's "1"); was: passed, x = [2]
    assert result["status"] == "failed" or result["x"] == [1], result


LINKED_IN_A_CHILD = (
    """import os, time
from pathlib import Path

"""
    + WAIT
    + """

def run(app):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker reads through the link while it is retargeted
        _at({mark!r})
        os.write(w, (app.weights / "0.csv").read_bytes())
        _at({mark2!r})
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    app.write("x", [int(os.read(r, 100))], ["a"])
"""
    + CRITERION
)


def test_fp3_in_a_forked_child_a_link_retargeted_for_the_read_and_put_back_fails(tmp_path: Path) -> None:
    """The same class in a DataLoader worker: the child's record of the name it read through goes to the parent."""
    source = tmp_path / "models"
    source.mkdir()
    for name, value in (("a.csv", "1"), ("b.csv", "2")):
        (source / name).write_text(value + "\n")
    link = str(source / "0.csv")
    os.symlink("a.csv", link)
    mark, mark2 = str(tmp_path / "mark"), str(tmp_path / "mark2")
    result = _application(
        tmp_path,
        {"weights": {"path": str(source)}},
        LINKED_IN_A_CHILD.format(mark=mark, mark2=mark2),
        TWICE.format(first=RELINK.format(to="b.csv", link=link), second=RELINK.format(to="a.csv", link=link),
                     mark=mark, mark2=mark2),
    )
    assert result["status"] == "failed" and "0.csv" in result["error"], result


OWN_LINK = (
    """import os
from pathlib import Path


def run(app):
    link = Path(os.getcwd()) / "weights-link.csv"
    os.symlink(app.weights / "a.csv", link)  # the application's own name for a source file, read, then removed
    value = int(link.read_text())
    os.remove(link)
    app.write("x", [value], ["a"])
"""
    + CRITERION
)


def test_fp3_control_a_link_the_application_made_read_then_removed_passes(tmp_path: Path) -> None:
    """No false failure from the names kept: a name the application made itself leads where it likes afterwards."""
    source = tmp_path / "models"
    source.mkdir()
    (source / "a.csv").write_text("1\n")
    result = _application(tmp_path, {"weights": {"path": str(source)}}, OWN_LINK,
                          "def before():\n    pass\ndef after():\n    pass\n")
    assert result["status"] == "passed" and result["x"] == [1], result


REMOVES_A_SOURCE_LINK = (
    """import os


def run(app):
    os.remove(app.weights / "0.csv")
    app.write("x", [1], ["a"])
"""
    + CRITERION
)


def test_fp3_control_removing_a_sources_own_link_is_still_refused(tmp_path: Path) -> None:
    """The guard on a removal lands on the name removed, not on what a link there names (so the application's own
    link to a source file may go): a source's own name, a link, is still the source's."""
    source = tmp_path / "models"
    source.mkdir()
    (source / "a.csv").write_text("1\n")
    os.symlink("a.csv", source / "0.csv")
    result = _application(tmp_path, {"weights": {"path": str(source)}}, REMOVES_A_SOURCE_LINK,
                          "def before():\n    pass\ndef after():\n    pass\n")
    assert result["status"] == "failed" and "0.csv" in result["error"] and "removed" in result["error"], result


# --- COST1: the judgement of one read in a forked child copies every source file's entry ----------------------------


class Counting(Mapping[str, str]):
    """A source_files mapping that counts how many of its entries a call touches."""

    def __init__(self, items: dict[str, str]) -> None:
        self.items_, self.touched = items, 0

    def __getitem__(self, key: str) -> str:
        self.touched += 1
        return self.items_[key]

    def __iter__(self) -> Iterator[str]:
        for key in self.items_:
            self.touched += 1
            yield key

    def __len__(self) -> int:
        return len(self.items_)

    def __contains__(self, key: object) -> bool:
        self.touched += 1
        return key in self.items_


def _touched_by_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int) -> int:
    root = tmp_path / "project"
    root.mkdir()
    (root / "sample.jsonl").write_text('{"id": "a"}\n')
    ctx = Context(
        config={"project_root": str(root), "application": {"sources": {}, "sample": "sample.jsonl"}},
        out=tmp_path / "out",
    )
    names = Counting({str(tmp_path / "data" / f"f{i}.bin"): "0" * 64 for i in range(files)})
    monkeypatch.setattr(world, "source_files", lambda _ctx: names)
    world.moved(ctx, [str(root / "sample.jsonl")])  # what _at_once does for each file a forked child opens
    return names.touched


def test_cost1_control_a_small_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _touched_by_one_read(tmp_path, monkeypatch, files=10) <= 20


def test_cost1_one_read_in_a_forked_child_touches_no_other_file_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _touched_by_one_read(tmp_path, monkeypatch, files=10_000) <= 20  # was: 10 000


# --- NOTE1: a declared file touched with no byte changed, after its read ---------------------------------------------

TOUCHED = (
    """import os, time
from pathlib import Path

"""
    + WAIT
    + """

def run(app):
    value = int((app.root / "tables" / "table.csv").read_text())
    _at({mark!r})
    app.write("x", [value], ["a"])
"""
    + CRITERION
)


def test_note1_a_declared_file_touched_after_its_read_fails_the_step(tmp_path: Path) -> None:
    table = tmp_path / "project" / "tables" / "table.csv"
    table.parent.mkdir(parents=True)
    table.write_text("1\n")
    mark = str(tmp_path / "mark")
    result = _application(
        tmp_path,
        {"files": ["tables/*.csv"]},
        TOUCHED.format(mark=mark),
        TWICE.format(first=f"import os; os.utime({str(table)!r})", second="pass", mark=mark, mark2=mark),
    )
    # the bytes read are the fingerprinted ones ("1"), yet: failed, "table.csv changed during the run"; behaviour
    # pinned (a touch cannot be told from a write put back without a close event): docs should say it
    assert result["status"] == "failed" and "table.csv" in result["error"] and result["x"] == [1], result


# --- held: a source file read through a hard link outside every declared name ----------------------------------------

HARD_LINKED = (
    """from pathlib import Path


def run(app):
    value = int(Path({other!r}).read_text())
    app.write("x", [value], ["a"])
"""
    + CRITERION
)


def test_held_a_source_file_read_through_a_hard_link_elsewhere_is_undeclared(tmp_path: Path) -> None:
    source = tmp_path / "external"
    source.mkdir()
    (source / "table.csv").write_text("1\n")
    other = tmp_path / "elsewhere.csv"
    os.link(source / "table.csv", other)  # the same file (device, inode), a name no declaration gives
    result = _application(
        tmp_path,
        {"data": {"eval": {"path": str(source)}}},
        HARD_LINKED.format(other=str(other)),
        "def before():\n    pass\ndef after():\n    pass\n",
    )
    assert result["status"] == "failed" and "elsewhere.csv" in result["error"], result
