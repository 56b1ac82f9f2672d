"""kernodeck/inenv/compiled.py and its reader, the in-env loader (_package.py): the build's compiled in-env files are
taken only for the bytes they were compiled from, only from a file this interpreter wrote, and only where the runner is
told of them (the orchestrator tells it only where the inventory proved the env's files the build's)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernodeck._fs import INENV
from kernodeck.env import envfiles
from kernodeck.env.envdirs import MARKER
from kernodeck.env.sealing import COMPILED_KEY
from kernodeck.inenv import compiled
from kernodeck.inenv._package import VerifiedSources
from kernodeck.verify.steps import in_env
from tests.helpers import basevenv


def _module(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mod.py"
    path.write_text(text, encoding="utf-8")
    return path


def _loaded(sources: VerifiedSources, path: Path) -> object:
    spec = importlib.util.spec_from_file_location("kernodeck_test_mod", path, loader=sources)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sources.exec_module(module)
    return module


def test_the_build_table_is_read_back_by_this_interpreter_only(tmp_path: Path) -> None:
    path = _module(tmp_path / "inenv", "X = 'source'\n")
    out = tmp_path / envfiles.COMPILED
    digest = compiled.write(path.parent, out)
    assert digest == hashlib.sha256(out.read_bytes()).hexdigest()
    table = compiled.read(out, digest)
    assert list(table) == [compiled.key(path, path.read_bytes())]
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically, nothing left beside it
    assert compiled.read(out, "0" * 64) == {}  # not the bytes the build wrote (red-team pass 84, BLOB1)
    for raw in (marshal.dumps((b"\x00\x00\r\n", compiled.OPTIMIZE, table)),  # another interpreter's magic number
                marshal.dumps((importlib.util.MAGIC_NUMBER, 2, table)),  # compiled for -OO
                b"not marshal data", b""):
        out.write_bytes(raw)
        assert compiled.read(out, hashlib.sha256(raw).hexdigest()) == {}
    assert compiled.read(tmp_path / "missing", digest) == {}


def test_the_loader_takes_the_builds_code_only_for_the_bytes_it_was_compiled_from(tmp_path: Path) -> None:
    """A table entry keyed by the file's own digest and path runs in place of compiling (shown by code that is not the
    source's); keyed by another digest or another path, the source is compiled from the bytes read. Either way the
    bytes' digest is what the loader records and checks."""
    path = _module(tmp_path / "inenv", "X = 'source'\n")
    source = path.read_bytes()
    planted = compile("X = 'table'\n", str(path), "exec", dont_inherit=True)
    sources = VerifiedSources(path.parent)
    sources.code = {compiled.key(path, source): planted}
    assert _loaded(sources, path).X == "table"  # type: ignore[attr-defined]
    assert sources.digests["mod.py"] == compiled.key(path, source)[1]
    for wrong in ((path.name, "0" * 64, str(path)), (path.name, compiled.key(path, source)[1], str(tmp_path / "x"))):
        sources = VerifiedSources(path.parent)
        sources.code = {wrong: planted}
        assert _loaded(sources, path).X == "source"  # type: ignore[attr-defined]


def _runner_loads(tmp_path: Path, table_path: Path | None, digest: str = "") -> subprocess.CompletedProcess[str]:
    """The runner as verify starts it, told to go nowhere (its stdin closed): it loads its siblings and stops."""
    python = basevenv.venv(tmp_path)
    argv = basevenv.runner_argv(python, tmp_path)
    if table_path is not None:
        at = argv.index("--config")
        argv[at:at] = [in_env.COMPILED, str(table_path), in_env.COMPILED_SHA256, digest]
    return basevenv.run(argv, tmp_path, "")


def test_the_runner_reads_the_table_it_is_given_before_its_first_sibling(tmp_path: Path) -> None:
    """A table whose entry for a sibling (by its real digest and path) writes a marker: run by the runner told of it
    with the digest of its bytes, and by none not told (the control: the same runner without ``--compiled``), nor by
    one told of another digest: the file edited since the build, its stat kept (red-team pass 84, BLOB1)."""
    marker = tmp_path / "marker"
    sibling = INENV / "protocol.py"
    table = {compiled.key(sibling, sibling.read_bytes()): compile(
        sibling.read_text(encoding="utf-8") + f"\nopen({str(marker)!r}, 'w').close()\n", str(sibling), "exec",
        dont_inherit=True)}
    table_path = tmp_path / envfiles.COMPILED
    table_path.write_bytes(marshal.dumps((importlib.util.MAGIC_NUMBER, compiled.OPTIMIZE, table)))
    digest = hashlib.sha256(table_path.read_bytes()).hexdigest()
    (tmp_path / "without").mkdir()
    _runner_loads(tmp_path / "without", None)
    assert not marker.exists()
    (tmp_path / "other").mkdir()
    _runner_loads(tmp_path / "other", table_path, "0" * 64)
    assert not marker.exists()
    (tmp_path / "with").mkdir()
    done = _runner_loads(tmp_path / "with", table_path, digest)
    assert marker.exists(), done.stderr[-2000:]


@pytest.mark.parametrize("proven", [True, False])
def test_the_runner_is_told_of_the_table_only_where_the_inventory_proved_it(tmp_path: Path, proven: bool) -> None:
    """runner_argv gives ``--compiled`` with the digest the env's completion record keeps only when the inventory's
    proof (of every file, or of the files a start reads) holds the file as a regular file of the env; the command a
    person runs again (procedure.md) never holds them, nor the word it waits for. An env whose record keeps no digest
    (built before) gets neither."""
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    (tmp_path / "env" / MARKER).write_text(json.dumps({COMPILED_KEY: "a" * 64}))
    stats = {envfiles.COMPILED: ["f", 1, 1, 1, 1, 0o100644, 1, ""]} if proven else {}
    run = SimpleNamespace(proven_start=None, proven_files=envfiles.Findings(stats=stats), staging=tmp_path)
    argv = in_env.runner_argv(run, python)  # type: ignore[arg-type]
    assert (in_env.COMPILED in argv) is proven and (in_env.COMPILED_SHA256 in argv) is proven
    if proven:
        assert argv[argv.index(in_env.COMPILED) + 1] == str(tmp_path / "env" / envfiles.COMPILED)
        assert argv[argv.index(in_env.COMPILED_SHA256) + 1] == "a" * 64
    shown = in_env.by_hand(argv)
    assert in_env.COMPILED not in shown and str(tmp_path / "env" / envfiles.COMPILED) not in shown
    assert in_env.COMPILED_SHA256 not in shown and "a" * 64 not in shown
    assert shown[-2:] == ["--config", str(tmp_path / "run-config.json")] and "--wait" not in shown
    link = {envfiles.COMPILED: ["l", 1, 1, 1, 1, 0o120777, 1, "elsewhere"]}
    run = SimpleNamespace(proven_start=None, proven_files=envfiles.Findings(stats=link), staging=tmp_path)
    assert in_env.COMPILED not in in_env.runner_argv(run, python)  # type: ignore[arg-type]
    run = SimpleNamespace(proven_start=None, proven_files=None, staging=tmp_path)
    assert in_env.COMPILED not in in_env.runner_argv(run, python)  # type: ignore[arg-type]
    # the proof of the files a start reads (env/startfiles.py), before every file's: the same command
    run = SimpleNamespace(proven_start=stats, proven_files=None, staging=tmp_path)
    assert (in_env.COMPILED in in_env.runner_argv(run, python)) is proven  # type: ignore[arg-type]
    (tmp_path / "env" / MARKER).write_text("{}")  # built before the digest was kept
    run = SimpleNamespace(proven_start=None, proven_files=envfiles.Findings(stats=stats), staging=tmp_path)
    assert in_env.COMPILED not in in_env.runner_argv(run, python)  # type: ignore[arg-type]
