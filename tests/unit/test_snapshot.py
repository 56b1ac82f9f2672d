"""The build's snapshot of an env (kernodeck/env/snapshot.py) read back: one whose entries are not what ``scan`` writes
is unreadable, a finding of the every-file check, never an exception out of its comparisons (red-team pass 89,
SNAP-MALFORMED1: ``[]``, ``5``, ``"x"``, ``["f"]`` or ``None`` as an entry raised IndexError, TypeError or
ValueError out of envfiles.check, on the code before the start files' proof too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernodeck.env import envfiles
from kernodeck.env.snapshot import BYTECODE, read_snapshot, scan, write_snapshot
from tests.helpers import basevenv


@pytest.mark.parametrize("bad", [[], 5, "x", ["f"], None], ids=["empty", "int", "str", "short", "none"])
def test_a_snapshot_with_a_malformed_entry_is_unreadable_not_a_traceback(tmp_path: Path, bad: object) -> None:
    env = basevenv.venv(tmp_path).parent.parent
    entries: dict[str, object] = dict(scan(env))
    assert read_snapshot(env, write_snapshot(env, entries, {}))[0] is not None  # the control: as scan wrote it
    entries["pyvenv.cfg"] = bad
    digest = write_snapshot(env, entries, {})  # its digest kept, as a completion record would
    snap, why = read_snapshot(env, digest)
    assert snap is None and "unreadable" in why
    found = envfiles.check(env, (), digest, None)
    assert not found.clean and "unreadable" in "; ".join(found.problems()), found.problems()


def test_a_malformed_list_of_later_bytecode_is_not_trusted_nor_a_traceback(tmp_path: Path) -> None:
    """The kept list of bytecode written since the build (trusted as it lies), malformed where a ``.pyc`` added since
    the build is looked up in it (``5``: TypeError before): ignored, so the file is not taken as checked and is named.
    The control: the same list well formed, holding the file as it is, takes it."""
    python = basevenv.venv(tmp_path)
    env = python.parent.parent
    digest = write_snapshot(env, scan(env), {"locked": []})  # nothing locked, as the build recorded it
    pyc = basevenv.site_packages(python) / "__pycache__" / "x.cpython-311.pyc"
    pyc.parent.mkdir()
    pyc.write_bytes(b"")
    rel = pyc.relative_to(env).as_posix()
    (env / BYTECODE).write_text(json.dumps({rel: 5}))
    found = envfiles.check(env, (), digest, None)
    assert not found.clean and any("x.cpython-311.pyc" in p for p in found.problems()), found.problems()
    now = scan(env)
    (env / BYTECODE).write_text(json.dumps({rel: now[rel], rel.rpartition("/")[0]: now[rel.rpartition("/")[0]]}))
    assert envfiles.check(env, (), digest, None).clean
