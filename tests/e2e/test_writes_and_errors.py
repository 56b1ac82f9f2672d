"""Do no harm (issue 11): nothing Kernodeck did not make is removed, replaced or half-written; errors, not tracebacks.

Each case runs what a user runs (``python -m kernodeck ...`` in a project copy) and shows what was kept. The verify
runs here use a project without lockfiles: verify stops at its first step, quickly and without building torch, but
(before these fixes) still swapped its dossier into ``--out``, which is exactly the harm shown.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.outfolders import lockless, refused, snapshot
from tests.helpers.project import ROOT, copy_project, kd

rel = pytest.mark.reliability


# --- 1. --out never replaces what Kernodeck did not make -------------------------------------------------------------


@rel(
    13,
    "`verify --out` pointed at the project (`.`, a parent, `.git`, `dossier/reference`), a user's folder, or a file",
    "refused with one ERROR + TIP before anything runs; every file in place; a Kernodeck dossier is still replaced",
)
@pytest.mark.parametrize("where", [".", "..", ".git", "dossier/reference", "requirements", "user-folder", "a-file"])
def test_verify_out_refuses_what_kernodeck_did_not_make(tmp_path: Path, where: str) -> None:
    project = lockless(tmp_path)
    (project / "uncommitted.txt").write_text("work in progress\n")
    user = tmp_path / "user-folder"
    user.mkdir()
    (user / "precious.txt").write_text("mine\n")
    (tmp_path / "a-file").write_text("a file\n")
    target = {"user-folder": user, "a-file": tmp_path / "a-file"}.get(where, project / where)
    before_project, before_outside = snapshot(project), snapshot(tmp_path / "user-folder")
    proc = kd(project, "verify", "--out", str(target))
    refused(proc, "--out")
    assert snapshot(project) == before_project
    assert snapshot(user) == before_outside
    assert (tmp_path / "a-file").read_text() == "a file\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left beside


@rel(
    13,
    "`verify --out` pointed at the project (`.`, a parent, `.git`, `dossier/reference`), a user's folder, or a file",
    "refused with one ERROR + TIP before anything runs; every file in place; a Kernodeck dossier is still replaced",
)
def test_verify_out_replaces_a_previous_dossier_and_accepts_new_or_empty(tmp_path: Path) -> None:
    project = lockless(tmp_path)
    empty, fresh, inside = tmp_path / "empty", tmp_path / "new" / "run", project / "runs" / "mine"
    empty.mkdir()
    for out in (empty, fresh, inside):
        proc = kd(project, "verify", "--out", str(out))
        assert proc.returncode == 2 and "no lockfile" in proc.stderr, proc.stderr  # it ran: lock-check failed
        report = json.loads((out / "report.json").read_text())
        assert report["status"] == "failed" and (out / ".kernodeck-folder").is_file()
    first = (fresh / "report.json").stat().st_ino
    proc = kd(project, "verify", "--out", str(fresh))  # its own untouched dossier: replaced whole
    assert proc.returncode == 2 and "no lockfile" in proc.stderr
    assert (fresh / "report.json").stat().st_ino != first
    # what Kernodeck did not write is never replaced (tests/e2e/test_out_folders.py: added files, edits, old dossiers)
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "report.json").write_text("[1, 2]\n")
    refused(kd(project, "verify", "--out", str(fake)), "did not write")
    assert (fake / "report.json").read_text() == "[1, 2]\n"


@rel(
    14,
    "`replay --out DIR`, `wheelhouse --out`, `compare --out`, `matrix --out` on a user's folder, a file or the project",
    "refused with one ERROR + TIP before anything runs (replay no longer removes DIR); the folder untouched",
)
@pytest.mark.parametrize("command", ["replay", "wheelhouse", "compare", "matrix"])
def test_every_writer_applies_the_same_out_rule(tmp_path: Path, command: str) -> None:
    project = lockless(tmp_path)
    user = tmp_path / "user-folder"
    user.mkdir()
    (user / "precious.txt").write_text("mine\n")
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}))
    lead = {"compare": ["compare", str(a), str(b)]}.get(command, [command])
    targets = [project / "dossier", project]
    targets.append(user if command != "matrix" else tmp_path / "a")  # matrix writes one file: a folder is refused
    if command != "matrix":
        targets.append(tmp_path / "a-file")
        (tmp_path / "a-file").write_text("a file\n")
    before = snapshot(project)
    for target in targets:
        proc = kd(project, *lead, "--out", str(target))
        refused(proc, "--out")
    assert snapshot(project) == before and (user / "precious.txt").read_text() == "mine\n"
    if command == "compare":  # and where it may write, it does
        assert kd(project, *lead, "--out", str(tmp_path / "cmp")).returncode == 0
        assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["status"]["a"] == "passed"
        assert kd(project, *lead, "--out", str(tmp_path / "cmp")).returncode == 0  # its own folder: replaced


# --- 3. staging leftovers of killed runs -----------------------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


@rel(
    15,
    "a verify killed (SIGKILL) while assembling its dossier, then the same `--out` again",
    "the dead run's `.NAME.staging-<pid>` removed; a live run's, other names and non-Kernodeck names kept",
)
def test_killed_verify_leftovers_are_cleaned_only_when_dead(tmp_path: Path) -> None:
    project = lockless(tmp_path)
    out = tmp_path / "run"
    # a real verify process killed with SIGKILL once its staging folder exists
    code = (
        "import sys, time; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from kernodeck.project.config import load_project; from kernodeck.project.platforms import resolve_platform;"
        "from kernodeck.verify.writer import prepare_out; p = load_project(Path(sys.argv[1]));"
        "prepare_out(p, Path(sys.argv[2]), resolve_platform(p, None, None)); print('staged', flush=True);"
        "time.sleep(600)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(project), str(out)], stdout=subprocess.PIPE, text=True
    ) as victim:
        assert victim.stdout is not None and victim.stdout.readline().strip() == "staged"
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
    killed = tmp_path / f".run.staging-{victim.pid}"
    assert killed.is_dir()
    # beside it: a live run's staging (this test's own process stands for it), another dossier's, and lookalikes
    live = tmp_path / f".run.staging-{os.getpid()}"
    other = tmp_path / f".other.staging-{_dead_pid()}"
    lookalike = tmp_path / ".run.staging-notapid"
    user_file = tmp_path / f".run.staging-{_dead_pid()}.txt"
    for folder in (live, other, lookalike):
        folder.mkdir()
        (folder / "keep").write_text("x")
    user_file.write_text("x")
    proc = kd(project, "verify", "--out", str(out))
    assert "no lockfile" in proc.stderr and "Traceback" not in proc.stderr
    assert not killed.exists(), "the dead run's staging folder stays forever"
    assert (live / "keep").exists() and (other / "keep").exists() and (lookalike / "keep").exists()
    assert user_file.exists() and (out / "report.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".run")) == sorted(
        [live.name, lookalike.name, user_file.name]
    )


@rel(
    15,
    "a verify killed (SIGKILL) while assembling its dossier, then the same `--out` again",
    "the dead run's `.NAME.staging-<pid>` removed; a live run's, other names and non-Kernodeck names kept",
)
def test_a_previous_dossier_parked_by_a_killed_swap_is_put_back(tmp_path: Path) -> None:
    from kernodeck import outdir

    out = tmp_path / "run"
    parked = tmp_path / f".run.old-{_dead_pid()}"
    parked.mkdir()
    (parked / "report.json").write_text("earlier")
    outdir.clean_leftovers(out)  # killed between the two renames: the earlier dossier comes back
    assert (out / "report.json").read_text() == "earlier" and not parked.exists()


# --- 2. a new reference is staged and swapped in whole; history only from a consistent reference ----------------------


def _new_reference(project_root: Path, tmp_path: Path) -> tuple[object, dict[str, object], Path]:
    """The project, a NEW manifest (other embeddings, recomputed id) and its outputs folder: what install receives."""
    from kernodeck._fs import sha256_file
    from kernodeck.project.config import load_project
    from kernodeck.runformat import manifest as dossier_manifest

    project = load_project(project_root)
    old = dossier_manifest.load(project)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    raw = bytearray((project.reference / "embeddings.npy").read_bytes())
    raw[-1] ^= 0x01  # one bit of the last float: new outputs, so a new identity
    (outputs / "embeddings.npy").write_bytes(bytes(raw))
    (outputs / "embeddings.ids.json").write_bytes((project.reference / "embeddings.ids.json").read_bytes())
    manifest = json.loads(json.dumps(old.manifest))
    manifest["outputs"]["embeddings"]["sha256"] = sha256_file(outputs / "embeddings.npy")
    manifest["provenance"]["previous_id"] = old.id
    manifest["id"] = dossier_manifest.identity(manifest)
    return project, manifest, outputs


def _consistent(folder: Path) -> bool:
    """The folder's outputs match its own manifest (what a history entry must be)."""
    import tomllib

    from kernodeck._fs import sha256_file
    from kernodeck.runformat.manifest import identity

    manifest = tomllib.loads((folder / "manifest.toml").read_text())
    return (
        manifest["id"] == identity(manifest)
        and sha256_file(folder / "embeddings.npy") == manifest["outputs"]["embeddings"]["sha256"]
        and sha256_file(folder / "embeddings.ids.json") == manifest["outputs"]["embeddings"]["ids_sha256"]
    )


class Killed(BaseException):
    """Stands for SIGKILL between two writes (a BaseException: no cleanup handler may swallow it)."""


@rel(
    16,
    "`nox -s reference -- --new` killed between its writes, then run again",
    "the reference is the old one or the new one, whole; history/<old-id>/ matches its own manifest",
)
@pytest.mark.parametrize("after_writes", [1, 2, 3, 4])
def test_reference_killed_midway_stays_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after_writes: int
) -> None:
    from kernodeck import _fs
    from kernodeck.dossier import new_reference as refmod
    from kernodeck.runformat import manifest as dossier_manifest

    project, manifest, outputs = _new_reference(copy_project(tmp_path / "project"), tmp_path)
    ref = project.reference  # type: ignore[attr-defined]
    before = snapshot(ref)
    old_id = str(dossier_manifest.load(project).id).replace(":", "-")  # type: ignore[arg-type]
    real, calls = _fs.write_atomic, []

    def dying(path: Path, data: str | bytes) -> None:
        calls.append(path)
        if len(calls) > after_writes:
            raise Killed
        real(path, data)

    monkeypatch.setattr(refmod, "write_atomic", dying)
    with pytest.raises(Killed):
        refmod.install(project, manifest, outputs, {"inventory": "inventory\n", "system": "{\"system\": 1}\n"})  # type: ignore[arg-type]
    monkeypatch.setattr(refmod, "write_atomic", real)
    assert snapshot(ref) == before, "a half-new reference"
    assert _consistent(ref)
    refmod.install(project, manifest, outputs, {"inventory": "inventory\n", "system": "{\"system\": 1}\n"})  # type: ignore[arg-type]
    assert _consistent(ref) and dossier_manifest.load(project).id == manifest["id"]  # type: ignore[arg-type]
    assert _consistent(ref / "history" / old_id)
    assert (ref / "history" / old_id / "manifest.toml").read_bytes() == before["manifest.toml"]
    assert [p.name for p in ref.parent.iterdir() if p.name.startswith(".")] == []


@rel(
    16,
    "`nox -s reference -- --new` killed between its writes, then run again",
    "the reference is the old one or the new one, whole; history/<old-id>/ matches its own manifest",
)
def test_history_is_never_copied_from_a_reference_that_does_not_match_its_manifest(tmp_path: Path) -> None:
    from kernodeck.dossier import new_reference as refmod
    from kernodeck.runformat import manifest as dossier_manifest

    project, manifest, outputs = _new_reference(copy_project(tmp_path / "project"), tmp_path)
    ref = project.reference  # type: ignore[attr-defined]
    old_id = str(dossier_manifest.load(project).id).replace(":", "-")  # type: ignore[arg-type]
    (ref / "embeddings.npy").write_bytes((outputs / "embeddings.npy").read_bytes())  # a half-new reference
    refmod.install(project, manifest, outputs, {"inventory": "inventory\n", "system": "{\"system\": 1}\n"})  # type: ignore[arg-type]
    assert _consistent(ref) and dossier_manifest.load(project).id == manifest["id"]  # type: ignore[arg-type]
    assert not (ref / "history" / old_id).exists(), "history holds embeddings that do not match its manifest"
    note = (ref / "history" / f"{old_id}.not-kept.txt").read_text()
    assert "embeddings.npy" in note and "does not match" in note


# --- 14. relocking unchanged inputs is byte-identical ----------------------------------------------------------------


@rel(
    17,
    "`nox -s lock` again with unchanged inputs under two different pip configurations (other find-links folders "
    "holding the same wheels, an extra index, other pip.conf sections and order), with pip-tools and with uv",
    "a byte-identical lock and PEP 751 twin: the header names the declared index and PyPI, and this machine's "
    "sources only as one fixed line (no kind, count, order or reachability of them)",
)
@pytest.mark.parametrize("resolver", ["pip-tools", "uv"])
def test_relock_of_unchanged_inputs_is_byte_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      resolver: str) -> None:
    from kernodeck.lock import check, inputs
    from kernodeck.lock import compile as lock_compile
    from kernodeck.lock.compile import MACHINE_SOURCES_NOTE
    from kernodeck.project.config import load_project
    from kernodeck.project.platforms import resolve_platform
    from tests.helpers.tinylock import offline_sources, tiny_project, tiny_wheels

    wheels = tiny_wheels(tmp_path / "wheels")
    other = tiny_wheels(tmp_path / "another-machine" / "wheelhouse")  # the same bytes, elsewhere
    offline_sources(monkeypatch, wheels, tmp_path / "cache")
    monkeypatch.delenv("PIP_FIND_LINKS")
    project = tiny_project(tmp_path / "p")
    proj = load_project(project)
    plat = resolve_platform(proj)
    extra = "http://127.0.0.1:9/extra"  # never asked (no-index)
    configs = (f"[global]\nfind-links = {wheels}\n",
               f"[global]\nextra-index-url = {extra}\n[install]\nfind-links = {other}\n    {wheels}\n")
    written = []
    for config in configs:
        conf = tmp_path / "pip.conf"
        conf.write_text(config)
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        inputs.lock_path(proj, plat).unlink(missing_ok=True)  # each lock from nothing, as on another machine
        target = lock_compile.compile_lock(proj, plat, resolver=resolver)
        written.append((target.read_bytes(), inputs.pylock_path(proj, plat).read_bytes()))
    text = written[0][0].decode()
    assert f"# source: {MACHINE_SOURCES_NOTE}\n" in text and "<local path>" not in text
    assert "unreachable" not in text and "# source: find-links" not in text and "# source: extra-index" not in text
    assert written[0][0].decode().splitlines() == written[1][0].decode().splitlines()
    assert written[0] == written[1]
    assert check.check_lock(proj, plat) == []


# --- 13. clear errors instead of tracebacks ---------------------------------------------------------------------------


def _dossier(folder: Path) -> Path:
    """A minimal valid dossier (what compare reads)."""
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}))
    (folder / "inventory.txt").write_text("numpy==2.4.6\n")
    return folder


def _npy(rows: int, dim: int) -> bytes:
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {dim}), }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\x00\x00\x80\x3f" * rows * dim


@rel(
    18,
    "`compare` of a malformed report.json, a JSON list, an empty or truncated .npy, a non-UTF-8 inventory",
    "one ERROR naming the file and what is wrong with it, and a TIP; no traceback",
)
@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("report.json", b'{"status": "passed", '),
        ("report.json", b"[1, 2, 3]\n"),
        ("system.json", b"{not json"),
        ("inventory.txt", b"numpy==2.4.6\n\xff\xfe caf\xe9\n"),
        ("outputs/embeddings.npy", b""),
        ("outputs/embeddings.npy", _npy(2, 4)[:70]),
        ("outputs/embeddings.npy", _npy(2, 4)[:-6]),
    ],
    ids=["report-truncated", "report-list", "system-json", "inventory-latin1", "npy-empty", "npy-header-cut",
         "npy-data-cut"],
)
def test_compare_of_damaged_dossiers_is_one_error(tmp_path: Path, damage: str, words: bytes) -> None:
    a, b = _dossier(tmp_path / "a"), _dossier(tmp_path / "b")
    for folder in (a, b):
        (folder / "outputs").mkdir()
        (folder / "outputs" / "embeddings.npy").write_bytes(_npy(2, 4))
        (folder / "outputs" / "ids.json").write_text('["x", "y"]')
    (b / damage).write_bytes(words)
    proc = kd(ROOT, "compare", str(a), str(b))
    refused(proc, damage.rsplit("/", 1)[-1])
    assert str(b) in proc.stderr


@rel(
    19,
    "`verify --python` given a path that does not exist, a folder, or a program that is not Python",
    "one ERROR naming the path and what it is, and a TIP; no traceback, nothing written",
)
@pytest.mark.parametrize("python", ["/nonexistent/bin/python", "folder", "not-executable", "/bin/true"])
def test_verify_python_that_is_no_interpreter(tmp_path: Path, python: str) -> None:
    project = lockless(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    path = python if python.startswith("/") else str(tmp_path / python)
    proc = kd(project, "verify", "--python", path, "--out", str(tmp_path / "run"))
    refused(proc, path)
    assert "--python" in proc.stderr.split("TIP:", 1)[1]
    assert not (tmp_path / "run").exists()


@rel(
    20,
    "two `nox -s lock` of the same platform at once",
    "the second waits for the first (a file lock, as rebuild takes); both succeed with the same lock; no traceback",
)
def test_two_locks_at_once(tmp_path: Path) -> None:
    from tests.helpers.tinylock import tiny_project, tiny_wheels

    wheels = tiny_wheels(tmp_path / "wheels")
    project = tiny_project(tmp_path / "p")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
               PIP_TOOLS_CACHE_DIR=str(tmp_path / "c1"), UV_CACHE_DIR=str(tmp_path / "c2"),
               XDG_CACHE_HOME=str(tmp_path / "c3"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]), PYTHONPATH=str(project))
    argv = [sys.executable, "-m", "kernodeck", "lock"]
    procs = [subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert "Traceback" not in err, err
        assert proc.returncode == 0, err
    assert any("waiting for it" in err for _, err in outs), "the two locks ran at the same time"
    lock = project / "lockfiles" / "cp311-linux_x86_64-cpu.txt"
    assert "kdtiny-alpha==1.0" in lock.read_text()
    assert not list((project / "lockfiles").glob(".*.compiling"))


@rel(
    21,
    "a direct URL requirement (`name @ https://...`) in a requirements .in file, `nox -s lock`",
    "one ERROR naming the .in file and its line (not the committed lock), and a TIP; the lock untouched",
)
@pytest.mark.parametrize("url", ["https://example.invalid/kdtiny_gamma-1.0-py3-none-any.whl", "file:///tmp/x.whl"])
def test_url_requirement_blames_the_in_file(tmp_path: Path, url: str) -> None:
    from tests.helpers.tinylock import tiny_project

    project = tiny_project(tmp_path / "p", base=f"kdtiny-alpha\n# a comment\nkdtiny-gamma @ {url}\n")
    proc = kd(project, "lock")
    refused(proc, "requirements/base.in:3", "kdtiny-gamma")
    assert "cp311-linux_x86_64-cpu.txt" not in proc.stderr.split("TIP:")[0]
    assert list((project / "lockfiles").iterdir()) == []


@rel(
    22,
    "the rebuilt env's `kernodeck-inventory.txt` deleted, then `verify --no-rebuild` and `verify`",
    "the error names the env file (not 'writing the dossier failed'); a plain verify builds a fresh env",
)
def test_missing_env_inventory_is_named(tmp_path: Path) -> None:
    from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, pip_wheel, write_wheel

    links = tmp_path / "links"
    project, plat = locked_tiny_project(tmp_path / "project", [pip_wheel(links), write_wheel(links, "tinya", "1.0")])
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    assert kd(project, "rebuild", env=env).returncode == 0
    first = current_env(project, plat)
    (first / "kernodeck-inventory.txt").unlink()
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"), env=env)
    assert "Traceback" not in proc.stderr and "writing the dossier" not in proc.stderr, proc.stderr
    assert proc.returncode != 0 and "kernodeck-inventory.txt" in proc.stderr and "TIP:" in proc.stderr
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 0, proc.stderr
    assert current_env(project, plat) != first and (current_env(project, plat) / "kernodeck-inventory.txt").exists()
