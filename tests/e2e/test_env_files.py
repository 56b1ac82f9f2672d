"""Every file of a rebuilt env is the lock's and unchanged since its build (kernodeck/env/envfiles.py).

Fast tests on a tiny hermetic lock (wheels built here, no index): each check fails on its bad input, naming it, and
passes on a clean build. The same checks on the real torch env, through ``verify``, are the slow cases at the end.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import marshal
import os
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernodeck._fs import INENV
from kernodeck.env import binding, envdirs, envfiles, inventory, sealing, snapshot
from kernodeck.errors import RebuildFailed
from kernodeck.inenv import compiled
from kernodeck.lock import lockfile
from kernodeck.project.platforms import Platform
from tests.helpers.project import kd
from tests.helpers.reports import read_report, statuses
from tests.helpers.tinylock import (
    built_tiny,
    current_env,
    env_wheels,
    locked_tiny_project,
    offline_env,
    pip_wheel,
    write_wheel,
)

rel = pytest.mark.reliability
Tiny = tuple[Path, Platform, dict[str, str]]
FRESH_TIP = "TIP: nox -s rebuild -- --fresh"


@pytest.fixture(scope="module")
def tiny_links(module_tmp: Path) -> tuple[Path, list[Path], Path]:
    """The tiny lock's wheels (byte-reproducible) and a uv cache, made once for the module's tiny builds: (the
    find-links folder, its wheels, the cache). A warm cache saves each build the unpacking of pip's wheel."""
    links = module_tmp / "links"
    return links, env_wheels(links), module_tmp / "uv-cache"


@pytest.fixture
def tiny(tmp_path: Path, tiny_links: tuple[Path, list[Path], Path]) -> Tiny:
    """A tiny project rebuilt once (uv, offline) for this test alone, to tamper with: (project, platform, the
    installers' environment)."""
    return built_tiny(tmp_path, *tiny_links)


@pytest.fixture(scope="module")
def tiny_read(module_tmp: Path, tiny_links: tuple[Path, list[Path], Path]) -> Iterator[Tiny]:
    """ONE tiny project rebuilt for the module's tests that only read its env (they never change it: each file of it
    is still its build's when the module ends, checked here)."""
    built = built_tiny(module_tmp / "read", *tiny_links)
    yield built
    project, plat, _ = built
    lock = lockfile.read(next((project / "lockfiles").glob(f"{plat.id}.txt")))
    after = sealing.check_files(current_env(project, plat), lock)
    assert after.clean and after.problems() == [], f"a reader changed the shared tiny env: {after.problems()}"


def _site(env_dir: Path) -> Path:
    return next(env_dir.glob("lib/python*/site-packages"))


def _same_size_edit(path: Path) -> None:
    """Change one byte, keep the size, put the old mtime back (what ``touch -r`` would hide from an mtime check)."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[0] = ord("#") if data[0] != ord("#") else ord("\n")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns


def _forged_bytecode(source: Path) -> Path:
    """A .pyc for ``source`` whose header matches the source (mtime, size) but whose code is another's."""
    st = source.stat()
    code = compile("VERSION = 'forged'\n", str(source), "exec")
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    tag = f"{importlib.util.cache_from_source(str(source)).rsplit('.', 2)[-2]}"
    target = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(header + marshal.dumps(code))
    return target


def _genuine_bytecode(source: Path) -> Path:
    import py_compile

    return Path(py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)), doraise=True))


# Each tampering of a built env, and the words its one-line error must hold.
TAMPER: dict[str, tuple[Callable[[Path, Path], None], list[str]]] = {
    "pth dropped": (lambda env, tmp: (_site(env) / "zz-evil.pth").write_text("import os\n"),
                    ["no locked distribution owns", "zz-evil.pth"]),
    "sitecustomize dropped": (lambda env, tmp: (_site(env) / "sitecustomize.py").write_text("print(1)\n"),
                              ["no locked distribution owns", "sitecustomize.py"]),
    "extra module": (lambda env, tmp: (_site(env) / "extra_mod.py").write_text("X = 1\n"),
                     ["no locked distribution owns", "extra_mod.py"]),
    "extra file in a package": (lambda env, tmp: (_site(env) / "tinya" / "helper.py").write_text("X = 1\n"),
                                ["no locked distribution owns", "tinya/helper.py"]),
    "extra package folder": (lambda env, tmp: ((_site(env) / "evilpkg").mkdir(),
                                               (_site(env) / "evilpkg" / "__init__.py").write_text("")),
                             ["no locked distribution owns", "evilpkg/"]),
    "same-size edit": (lambda env, tmp: _same_size_edit(_site(env) / "tinya" / "__init__.py"),
                       ["changed since the build", "tinya/__init__.py (ctime_ns"]),
    "RECORD removed": (lambda env, tmp: (_site(env) / "tinya-1.0.dist-info" / "RECORD").unlink(),
                       ["without a RECORD: tinya"]),
    "hard link": (lambda env, tmp: os.link(_site(env) / "tinyb" / "__init__.py", tmp / "elsewhere.py"),
                  ["shared with another place (hard links)", "tinyb/__init__.py"]),
    "file removed": (lambda env, tmp: (_site(env) / "tinyb" / "__init__.py").unlink(),
                     ["tinyb/__init__.py (missing)", "removed since the build"]),
    "mode changed": (lambda env, tmp: (_site(env) / "tinya" / "__init__.py").chmod(0o777),
                     ["changed since the build", "tinya/__init__.py (ctime_ns, mode)"]),
    "forged bytecode": (lambda env, tmp: _forged_bytecode(_site(env) / "tinya" / "__init__.py") and None,
                        ["bytecode written since the build that is not its source's",
                         "not the bytecode of its source"]),
    "bytecode of another interpreter": (
        lambda env, tmp: (_site(env) / "tinya" / "__pycache__").mkdir() or (
            _site(env) / "tinya" / "__pycache__" / "__init__.cpython-27.pyc").write_bytes(b"x"),
        ["no locked distribution owns", "tinya/__pycache__/__init__.cpython-27.pyc"]),
}


def _fake_env(root: Path, before_seal: Callable[[Path], str | None] = lambda env: None,
              ) -> tuple[Path, lockfile.Lockfile]:
    """A venv-shaped folder with two installed distributions and their RECORDs, sealed as a rebuild seals an env
    (``before_seal``: what the build writes into it last, and the digest of the compiled in-env files it wrote)."""
    import sys
    from types import SimpleNamespace

    from kernodeck.lock.lockfile import Lockfile, Pin

    env = root / "env"
    site = env / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(sys.executable)
    (env / "pyvenv.cfg").write_text(f"home = /x\nversion_info = {sys.version_info[0]}.{sys.version_info[1]}.0\n")
    for name, version in (("tinya", "1.0"), ("tinyb", "2.0")):
        files = {f"{name}/__init__.py": f"VERSION = {version!r}\n", f"{name}-{version}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
        record = ""
        for path, text in files.items():
            (site / path).parent.mkdir(parents=True, exist_ok=True)
            (site / path).write_text(text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record += f"{path},sha256={digest},{len(text.encode())}\n"
        (site / f"{name}-{version}.dist-info" / "RECORD").write_text(record + f"{name}-{version}.dist-info/RECORD,,\n")
    lock = Lockfile(path=root / "lock.txt", header={"body-digest": ["sha256:" + "b" * 64]},  # a sealed lock's
                    pins=[Pin("tinya", "1.0", "", ("1" * 64,), 1), Pin("tinyb", "2.0", "", ("2" * 64,), 2)])
    compiled_digest = before_seal(env) or ""
    sealed = sealing.seal(env, lock, {}, SimpleNamespace(id="tiny"), compiled=compiled_digest)  # type: ignore[arg-type]
    # bound to its lock as a build records it (a uv build: the pin's hashes its install verified)
    sealed.update(binding.record(lock, binding.from_verified(lock), binding.HashSource.VERIFIED))
    (env / envdirs.MARKER).write_text(json.dumps(sealed))
    return env, lock


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_each_check_fails_on_its_tampering(tmp_path: Path, case: str) -> None:
    """In process, on a hand-made env: the clean one passes, each tampering is found and named."""
    env, lock = _fake_env(tmp_path)
    clean = sealing.check_files(env, lock)
    assert clean.clean and clean.problems() == [] and clean.owned == 6, clean.problems()
    tamper, words = TAMPER[case]
    tamper(env, tmp_path)
    found = sealing.check_files(env, lock)
    line = "; ".join(found.problems())
    assert not found.clean
    for word in words:
        assert word in line, line


def test_the_compiled_in_env_files_are_held_to_the_build_like_any_file(tmp_path: Path) -> None:
    """envfiles.COMPILED (inenv/compiled.py) is allowed at the env's root by its exact path, and held by the snapshot:
    planted in an env built without it, it is an addition; written before the seal and rewritten since (its bytes
    the same), it changed since the build; anywhere else it is no file the venv tool writes."""
    env, lock = _fake_env(tmp_path / "without")
    compiled.write(INENV, env / envfiles.COMPILED)  # planted after the build
    found = sealing.check_files(env, lock)
    assert not found.clean and f"added since the build: {envfiles.COMPILED}" in found.problems(), found.problems()
    env, lock = _fake_env(tmp_path / "with", before_seal=lambda env: compiled.write(INENV, env / envfiles.COMPILED))
    assert sealing.check_files(env, lock).clean  # the control: written at the build, allowed and unchanged
    (env / envfiles.COMPILED).write_bytes((env / envfiles.COMPILED).read_bytes())
    line = "; ".join(sealing.check_files(env, lock).problems())
    assert f"changed since the build: {envfiles.COMPILED} (" in line and "ctime_ns" in line, line
    entry: snapshot.Entry = ["f", 1, 0, 0, 1, 0o100644, 1, ""]
    assert envfiles.allowed(envfiles.COMPILED, entry, {}, sys.implementation.cache_tag)
    assert not envfiles.allowed(f"bin/{envfiles.COMPILED}", entry, {}, sys.implementation.cache_tag)
    assert not envfiles.allowed(envfiles.COMPILED, ["l", *entry[1:]], {}, sys.implementation.cache_tag)


def test_the_compiled_in_env_files_are_sealed_only_as_the_compile_step_wrote_them(tmp_path: Path) -> None:
    """Red-team pass 84, BLOB1: the file replaced after the compile step wrote it and before the seal (another table
    under the true keys) was held by its stat alone. The seal now holds it to the digest the compile step named, and
    the completion record keeps that digest (the runner holds the bytes it reads to it); the control seals."""
    def replaced(env: Path) -> str:
        digest = compiled.write(INENV, env / envfiles.COMPILED)
        compiled.write(tmp_path, env / envfiles.COMPILED)  # another table in its place, before the seal
        return digest

    with pytest.raises(RebuildFailed, match=rf"{envfiles.COMPILED} is not what the compile step wrote"):
        _fake_env(tmp_path / "replaced", replaced)
    env, lock = _fake_env(tmp_path / "kept", lambda env: compiled.write(INENV, env / envfiles.COMPILED))
    kept = json.loads((env / envdirs.MARKER).read_text())[sealing.COMPILED_KEY]
    assert kept == hashlib.sha256((env / envfiles.COMPILED).read_bytes()).hexdigest() == sealing.compiled_digest(env)
    assert sealing.check_files(env, lock).clean


@pytest.mark.slow
@rel(
    46,
    "a tiny rebuilt env tampered with after its build, one way at a time: a .pth, a sitecustomize.py, an extra "
    "module, package file or folder, a same-size edit with its mtime put back, a RECORD removed, a hard link, a file "
    "removed, a chmod, forged bytecode; then `rebuild` (which reuses only an intact env)",
    "each is refused with one ERROR line naming the file and the cause (not owned by a locked RECORD, changed since "
    "the build's snapshot, shared, missing) and `TIP: nox -s rebuild -- --fresh`; the fresh rebuild is reused again",
)
@pytest.mark.parametrize("case", sorted(TAMPER))
def test_tampered_env_is_named_and_fresh_rebuild_repairs_it(tiny: Tiny, tmp_path: Path, case: str) -> None:
    project, plat, env = tiny
    built = current_env(project, plat)
    tamper, words = TAMPER[case]
    tamper(built, tmp_path)
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "was changed after it was built" in errors[0], proc.stderr[-2000:]
    for word in words:
        assert word in errors[0], errors[0]
    assert FRESH_TIP in proc.stderr
    if case == "same-size edit":  # the TIP repairs it, and the repaired env is reused as intact
        assert kd(project, "rebuild", "--fresh", env=env).returncode == 0
        again = kd(project, "rebuild", env=env)
        assert again.returncode == 0 and "reusing" in again.stderr, again.stderr[-2000:]


def test_clean_build_passes_every_check_and_holds_no_shared_file(tiny_read: Tiny) -> None:
    project, plat, _ = tiny_read
    built = current_env(project, plat)
    marker = json.loads((built / envdirs.MARKER).read_text(encoding="utf-8"))
    lock = lockfile.read(next((project / "lockfiles").glob(f"{plat.id}.txt")))
    found = sealing.check_files(built, lock)
    assert found.clean and found.problems() == [], found.problems()
    assert found.entries == marker["files_snapshot"]["entries"] > 0
    assert marker["record_digests"]["files"] > 0 and marker["record_digests"]["mismatched"] == []
    install = next(c for c in marker["commands"] if " install " in c)
    assert "--no-cache --link-mode hardlink" in install and "--compile-bytecode" not in install
    regular = [p for p in built.rglob("*") if p.is_file() and not p.is_symlink()]
    assert regular and all(p.stat().st_nlink == 1 for p in regular)
    # Kernodeck's in-env files, compiled by the base interpreter at the build, held by the snapshot like the rest
    assert any("compiled.py" in c for c in marker["commands"])
    assert set(compiled.read(built / envfiles.COMPILED, marker[sealing.COMPILED_KEY])) == {
        compiled.key(p, p.read_bytes()) for p in sorted((project / "kernodeck" / "inenv").resolve().glob("*.py"))}


@rel(
    48,
    "bytecode written into the env after its build: the interpreter's own (py_compile of an owned module) and a "
    "forged one (header matching the source's mtime and size, other code)",
    "the genuine file is checked once against what the env's interpreter compiles from the unchanged source and "
    "kept (kernodeck-bytecode.json, later runs compare its stat only); the forged one is refused, named",
)
def test_bytecode_written_since_the_build(tiny: Tiny) -> None:
    project, plat, env = tiny
    built = current_env(project, plat)
    lock = lockfile.read(next((project / "lockfiles").glob(f"{plat.id}.txt")))
    pyc = _genuine_bytecode(_site(built) / "tinya" / "__init__.py")
    first = sealing.check_files(built, lock)
    assert first.clean, first.problems()
    assert (first.bytecode_later, first.bytecode_checked_now) == (1, 1)
    kept = json.loads((built / snapshot.BYTECODE).read_text(encoding="utf-8"))
    assert str(pyc.relative_to(built)) in kept
    second = sealing.check_files(built, lock)
    assert second.clean and second.bytecode_checked_now == 0  # kept: compared by stat only
    assert kd(project, "rebuild", env=env).returncode == 0
    _forged_bytecode(_site(built) / "tinyb" / "__init__.py")
    third = sealing.check_files(built, lock)
    assert not third.clean
    assert third.bad_bytecode == [
        f"{_site(built).relative_to(built)}/tinyb/__pycache__/{pyc.name} (not the bytecode of its source)"
    ]
    # a kept file replaced afterwards is checked again, not trusted by its name
    _forged_bytecode(_site(built) / "tinya" / "__init__.py")
    fourth = sealing.check_files(built, lock)
    assert any("tinya/__pycache__" in b for b in fourth.bad_bytecode), fourth.problems()


def _bad_wheel(folder: Path, name: str, how: str) -> Path:
    """A wheel whose RECORD lies: a wrong digest of the same size, or a file it does not list."""
    wheel = write_wheel(folder / "src", name, "1.0")
    out = folder / wheel.name
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("RECORD"):
                text = data.decode()
                if how == "digest":
                    other = base64.urlsafe_b64encode(hashlib.sha256(b"other").digest()).rstrip(b"=").decode()
                    text = "\n".join(
                        f"{r.split(',')[0]},sha256={other},{r.split(',')[2]}" if r.startswith(f"{name}/") else r
                        for r in text.splitlines()) + "\n"
                data = text.encode()
            dst.writestr(info, data)
        if how == "unlisted":
            dst.writestr(f"{name}/unlisted.py", "X = 1\n")
    return out


@rel(
    47,
    "a wheel whose installed files do not match its RECORD (a digest of the same size that differs; a file the RECORD "
    "does not list), rebuilt with `rebuild --fresh`",
    "the build checks every installed file against its RECORD digest once (in parallel threads) and every file's "
    "owner before it writes the snapshot: the rebuild fails, naming the file; the previous env is kept",
)
def test_build_refuses_files_that_are_not_their_record(tmp_path: Path) -> None:
    words = ["differ from their RECORD digest", "tinyc/__init__.py (content differs from RECORD)",
             "does not hold what its own RECORD says", "report the wheel"]
    links = tmp_path / "links"
    wheels = [pip_wheel(links), _bad_wheel(links, "tinyc", "digest")]
    project, plat = locked_tiny_project(tmp_path / "project", wheels)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len([line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]) == 1, proc.stderr[-2000:]
    for word in words:
        assert word in proc.stderr, proc.stderr[-2000:]
    assert not (project / ".venv-rebuild" / plat.id / "CURRENT").exists()  # nothing promoted


@pytest.mark.parametrize("case", ["extra module", "RECORD removed", "hard link"])
def test_seal_refuses_an_env_that_is_not_the_locks(tmp_path: Path, case: str) -> None:
    """The build's own check (before the snapshot is written): a file no locked RECORD owns, a locked distribution
    without RECORD, a shared file, each refuses the build."""
    from types import SimpleNamespace


    env, lock = _fake_env(tmp_path)
    (env / snapshot.SNAPSHOT).unlink()
    tamper, words = TAMPER[case]
    tamper(env, tmp_path)
    with pytest.raises(RebuildFailed) as info:
        sealing.seal(env, lock, {}, SimpleNamespace(id="tiny"))  # type: ignore[arg-type]
    for word in words:
        assert word in str(info.value) or word == "changed since the build", str(info.value)
    assert not (env / snapshot.SNAPSHOT).exists()


def test_ownership_rules_exactly(tmp_path: Path) -> None:
    """The allow-list, entry by entry: what the venv tools and the interpreter write, and nothing near it."""
    owned = {"lib/python3.11/site-packages/a/mod.py": "a", "lib/python3.11/site-packages/a/x.y.py": "a"}
    f: snapshot.Entry = ["f", 1, 0, 0, 1, 0o100644, 1, ""]
    link = ["l", 1, 0, 0, 1, 0o120777, 1, "/usr/bin/python3.11"]
    ok = [("pyvenv.cfg", f), ("bin/activate", f), ("bin/python", link), ("bin/python3.11", link),
          ("lib64", ["l", 3, 0, 0, 1, 0o120777, 1, "lib"]),
          ("lib/python3.11/site-packages/a/__pycache__/mod.cpython-311.pyc", f),
          ("lib/python3.11/site-packages/a/__pycache__/mod.cpython-311.opt-1.pyc", f),
          ("lib/python3.11/site-packages/a/__pycache__/x.y.cpython-311.pyc", f)]  # x.y.py's, loaded by path
    refused = [("bin/evil", f), ("pyvenv.cfg", link), ("lib64", ["l", 3, 0, 0, 1, 0o120777, 1, "/tmp"]),
               ("lib/python3.11/site-packages/a/__pycache__/other.cpython-311.pyc", f),
               ("lib/python3.11/site-packages/a/__pycache__/mod.cpython-312.pyc", f),
               ("lib/python3.11/site-packages/a/__pycache__/mod.cpython-311.opt-3.pyc", f),
               ("lib/python3.11/site-packages/a/mod.cpython-311.pyc", f),
               ("lib/python3.11/site-packages/x.pth", f), ("lib/python3.11/site-packages/sitecustomize.py", f),
               ("lib/python3.11/site-packages/a/__pycache__/mod.x.cpython-311.pyc", f),  # mod.x.py: not owned
               ("lib/python3.11/site-packages/a/__pycache__/.cpython-311.pyc", f),
               ("lib/python3.11/site-packages/a/__pycache__/mod.cpython-311.pyc", ["d", 1, 0, 0, 1, 0o40755, 1, ""])]
    for path, entry in ok:
        assert envfiles.allowed(path, entry, owned, "cpython-311"), path
    for path, entry in refused:
        assert not envfiles.allowed(path, entry, owned, "cpython-311"), path
    assert envfiles.source_of("a/__pycache__/x.y.cpython-311.opt-2.pyc", "cpython-311") == "a/x.y.py"
    assert envfiles.source_of("a/__pycache__/x.y.cpython-312.pyc", "cpython-311") is None


def test_snapshot_not_the_builds_is_refused(tiny: Tiny) -> None:
    """A snapshot rewritten after the build (so that a change would match it) differs from the completion record's
    digest: no comparison is trusted, the env is refused."""
    project, plat, env = tiny
    built = current_env(project, plat)
    (_site(built) / "tinya" / "__init__.py").write_text("VERSION = 'x'\n")
    data = json.loads((built / snapshot.SNAPSHOT).read_text(encoding="utf-8"))
    data["entries"] = snapshot.scan(built)
    (built / snapshot.SNAPSHOT).write_text(json.dumps(data, separators=(",", ":")) + "\n")
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 2 and "is not the one written at the build" in proc.stderr, proc.stderr[-2000:]


def test_observe_without_files_reads_no_record_rows(tiny_read: Tiny) -> None:
    project, plat, _ = tiny_read
    python = envdirs.env_python(current_env(project, plat))
    assert inventory.observe(python).files_checked > 0
    light = inventory.observe(python, files=False)
    assert light.files_checked == 0 and light.packages == inventory.observe(python).packages


# --- code dropped into the env never runs before its files are known clean -----------------------------------------


def _plant(site: Path, kind: str, marker: Path) -> Path:
    """Start-up code that writes ``marker`` when the env's interpreter runs it: a ``.pth`` import line, or a
    ``sitecustomize.py``."""
    code = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n"
    target = site / ("zz-hook.pth" if kind == "pth" else "sitecustomize.py")
    target.write_text(code)
    return target


def _started_as_usual(python: Path) -> None:
    """The env's interpreter started the way every check starts it (``site`` on)."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "UV_"))}
    subprocess.run([str(python), "-c", "pass"], env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, check=True)


@rel(
    58,
    "a `.pth` whose import line, or a `sitecustomize.py` that, writes a marker file, dropped into a tiny rebuilt "
    "env beside bytecode written since the build (which the env's interpreter checks); then `rebuild` (its reuse "
    "check), verify's inventory step, and the observation an existing interpreter gets",
    "refused, naming the file, and the marker is never written: the packages are read from outside the env, the "
    "bytecode check (the interpreter, `-I -S`) does not start over a foreign file (`1 bytecode file(s) ... not "
    "checked`), an existing interpreter reports itself with `-I -S`; control: the same env started as usual writes it",
)
@pytest.mark.parametrize("kind", ["pth", "sitecustomize"])
def test_dropped_startup_code_never_runs(tiny: Tiny, tmp_path: Path, kind: str) -> None:
    project, plat, env = tiny
    built = current_env(project, plat)
    python = envdirs.env_python(built)
    lock = lockfile.read(next((project / "lockfiles").glob(f"{plat.id}.txt")))
    _genuine_bytecode(_site(built) / "tinya" / "__init__.py")  # what the env's interpreter would be started to check
    marker = tmp_path / "ran"
    planted = _plant(_site(built), kind, marker)
    _started_as_usual(python)
    assert marker.read_text() == "ran"  # control: the planted code runs in an ordinary start
    marker.unlink()
    proc = kd(project, "rebuild", env=env)
    assert not marker.exists(), "rebuild's reuse check ran the planted code"
    assert proc.returncode == 2 and planted.name in proc.stderr and FRESH_TIP in proc.stderr, proc.stderr[-2000:]
    assert "1 bytecode file(s) written since the build not checked" in proc.stderr
    details, _, failure = _step_on(built, lock, tmp_path)
    assert not marker.exists(), "verify's inventory step ran the planted code"
    assert details["status"] == "failed" and planted.name in failure and "no locked distribution owns" in failure
    assert details["vs_lock"] == {"added": {}, "removed": {}, "changed": {}}  # the packages, read from outside
    assert details["files"]["bytecode_since_build"] == {  # type: ignore[index]
        "files": 1, "checked_now": 0, "not_checked": 1, "not_its_source": []}
    inside = inventory.observe(python)  # an existing interpreter reports itself, started with -I -S
    assert inside.files_checked > 0 and inside.packages == inventory.observe(python, files=False).packages
    assert not marker.exists(), "the env's own observation ran the planted code"
    planted.unlink()  # gone: the bytecode is checked by the env's interpreter and the env is reused
    again = kd(project, "rebuild", env=env)
    assert again.returncode == 0 and "reusing" in again.stderr, again.stderr[-2000:]
    found = sealing.check_files(built, lock)
    assert found.clean and found.bytecode_later == 1 and found.bytecode_unchecked == 0 and not marker.exists()


@rel(
    59,
    "a rebuilt env's packages read from outside it (each `*.dist-info` by importlib.metadata), against what its own "
    "interpreter reports: a direct reference, an editable install, a `.pth` naming another folder (holding a "
    "distribution and a second copy of a locked one) beside an import line that writes a marker",
    "the same record (packages, editable/direct URLs, the shadowed copy, the freeze text); the `.pth`'s folder is "
    "followed and its import line neither run nor followed by either; control: an ordinary start runs it",
)
def test_observed_from_outside_is_the_envs_own_report(tiny: Tiny, tmp_path: Path) -> None:
    project, plat, _ = tiny
    built = current_env(project, plat)
    python, site = envdirs.env_python(built), _site(built)
    (next(site.glob("tinyb-*.dist-info")) / "direct_url.json").write_text(
        json.dumps({"url": "file:///wheels/tinyb-2.0-py3-none-any.whl", "archive_info": {}}))
    local = site / "localapp-0.1.dist-info"
    local.mkdir()
    (local / "METADATA").write_text("Metadata-Version: 2.1\nName: localapp\nVersion: 0.1\n")
    (local / "direct_url.json").write_text(json.dumps({"url": "file:///src/localapp", "dir_info": {"editable": True}}))
    extra = tmp_path / "extra"
    for name, version in (("extdist", "3.0"), ("tinya", "0.9")):
        info = extra / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{info.name}/METADATA,,\n")
    marker = tmp_path / "ran"
    hook = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')"
    (site / "zz-paths.pth").write_text(f"# a comment\n{extra}\n{hook}\n")
    outside, inside = inventory.observe(python, files=False), inventory.observe_inside(python, files=False)
    assert not marker.exists()
    assert outside.depth == inside.depth == "none (checked outside the env)"
    assert (outside.packages, outside.unrecorded, outside.text) == (inside.packages, inside.unrecorded, inside.text)
    assert outside.shadowed == inside.shadowed == {"tinya": [f"0.9 at {extra}"]}
    assert outside.packages["extdist"] == "3.0" and outside.packages["tinya"] == "1.0"
    assert outside.packages["tinyb"] == "@ file:///wheels/tinyb-2.0-py3-none-any.whl"
    assert outside.packages["localapp"] == "-e file:///src/localapp" and outside.unrecorded == ["localapp"]
    _started_as_usual(python)
    assert marker.read_text() == "ran"  # control: the import line is code that an ordinary start runs


@pytest.mark.parametrize("system_site", [False, True])
def test_observe_without_site_sees_what_site_would_add(tmp_path: Path, system_site: bool) -> None:
    """observe.py under ``-I -S`` lists the distributions the same script lists with ``site`` on (``-I``, what the
    observation was before), in a venv with and without the base's site-packages, and a ``.pth`` path line."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv),  # type: ignore[attr-defined]
                    *(["--system-site-packages"] if system_site else [])], check=True)
    python, extra = venv / "bin" / "python", tmp_path / "extra"
    info = extra / "extdist-3.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: extdist\nVersion: 3.0\n")
    (_site(venv) / "zz-paths.pth").write_text(f"{extra}\n")

    def listed(*flags: str) -> list[tuple[str, str]]:
        proc = subprocess.run([str(python), *flags, str(inventory.OBSERVER), "--no-files"], capture_output=True,
                              text=True, check=True, env={"PATH": os.environ.get("PATH", "")})
        return [(d["name"], d["location"]) for d in json.loads(proc.stdout)["distributions"]]

    with_site, without = listed("-I"), listed("-I", "-S")
    assert without == with_site and ("extdist", str(extra)) in without
    assert any(location.startswith(sys.base_prefix) for _, location in without) is system_site


# --- the real env (torch), through verify ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(tiny_referenced: Path, module_tmp: Path) -> Path:
    """A copy of the project with its OWN real env rebuilt (this machine's package sources), declaring the tiny
    application with its reference (a copy of the session's referenced tiny project, its links to the shared env
    removed): what is tried is the real torch env's files; the one verify that passes here (case 43) then runs
    without MiniLM's model load and runs."""
    import shutil

    from tests.helpers.tinyapp import copy_referenced

    project = copy_referenced(tiny_referenced, module_tmp)
    shutil.rmtree(project / ".venv-rebuild")  # the links to the session's env, not what they name
    proc = kd(project, "rebuild")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return project


def _real_site(project: Path) -> Path:
    return _site((project / ".venv-rebuild" / "cp311-linux_x86_64-cpu" / "current").resolve())


def _verify_fails_at_inventory(project: Path, out: Path, *words: str) -> dict[str, object]:
    proc = kd(project, "verify", "--no-rebuild", "--out", str(out))
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    for word in words:
        assert word in errors[0], errors[0]
    assert FRESH_TIP in proc.stderr
    report = read_report(out)
    assert report["first_failure"] == "inventory" and statuses(report)["settings"] == "not-run"
    return report


@pytest.mark.slow
@rel(
    42,
    "a `.pth`, a `sitecustomize.py` and an extra module dropped into the real env's site-packages (their code would "
    "run in every check), then `verify -- --no-rebuild`",
    "the inventory step (every file owned by a locked RECORD, checked from outside the env before its interpreter "
    "runs) fails naming the three files; nothing of the env runs; once they are removed the env is reused as intact "
    "(`rebuild --fresh` repairing an env: case 43)",
)
def test_dropped_code_fails_verify(real: Path, tmp_path: Path) -> None:
    site = _real_site(real)
    dropped = [site / "zz-hook.pth", site / "sitecustomize.py", site / "extra_module.py"]
    for path, code in zip(dropped, ("import os; os.environ['HOOKED'] = '1'\n", "import os\n", "X = 1\n"), strict=True):
        path.write_text(code)
    report = _verify_fails_at_inventory(real, tmp_path / "out", "zz-hook.pth", "sitecustomize.py", "extra_module.py")
    inv = next(s for s in report["steps"] if s["name"] == "inventory")  # type: ignore[union-attr]
    files = inv["details"]["files"]
    assert {"zz-hook.pth", "sitecustomize.py", "extra_module.py"} <= {p.rsplit("/", 1)[-1] for p in files["foreign"]}
    # the refusal was those three files and nothing else: removed, the env is intact again and reused (the fresh
    # rebuild that a changed file of the env needs is case 43's)
    for path in dropped:
        path.unlink()
    proc = kd(real, "rebuild")
    assert proc.returncode == 0 and "reusing" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
@rel(
    49,
    "a `.pth` and a `sitecustomize.py` that each write a marker file when run, dropped into the real env beside "
    "bytecode written since the build; then `verify -- --no-rebuild`, `verify` and `rebuild`",
    "each refuses at the files, naming both; neither marker is written (the env's interpreter is not started before "
    "the files are known clean) and the package comparison is still reported; control: the env's interpreter started "
    "as usual writes both; once they are gone the bytecode is checked and the env reused",
)
def test_dropped_startup_code_does_not_run_in_verify(real: Path, tmp_path: Path) -> None:
    site = _real_site(real)
    python = site.parents[2] / "bin" / "python"
    _genuine_bytecode(site / "torch" / "version.py")
    markers = {kind: tmp_path / f"ran-{kind}" for kind in ("pth", "sitecustomize")}
    planted = [_plant(site, kind, marker) for kind, marker in markers.items()]
    _started_as_usual(python)
    assert all(m.read_text() == "ran" for m in markers.values())  # control: an ordinary start runs both
    for marker in markers.values():
        marker.unlink()
    report = _verify_fails_at_inventory(real, tmp_path / "out", "zz-hook.pth", "sitecustomize.py")
    assert not any(m.exists() for m in markers.values()), "verify --no-rebuild ran the planted code"
    inv = next(s for s in report["steps"] if s["name"] == "inventory")  # type: ignore[union-attr]
    assert inv["details"]["vs_lock"] == {"added": {}, "removed": {}, "changed": {}}
    assert inv["details"]["files"]["bytecode_since_build"]["not_checked"] >= 1
    proc = kd(real, "verify", "--out", str(tmp_path / "rebuilt"))
    assert proc.returncode == 2 and "zz-hook.pth" in proc.stderr, proc.stderr[-2000:]
    assert read_report(tmp_path / "rebuilt")["first_failure"] == "inventory"
    proc = kd(real, "rebuild")
    assert proc.returncode == 2 and "sitecustomize.py" in proc.stderr and "not reused" in proc.stderr
    assert not any(m.exists() for m in markers.values()), "verify or rebuild ran the planted code"
    for path in planted:
        path.unlink()
    proc = kd(real, "rebuild")
    assert proc.returncode == 0 and "reusing" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
@rel(
    44,
    "torch's `RECORD` removed from the real env (its files would no longer be checked), then `verify -- --no-rebuild`",
    "refused: `locked distribution(s) without a RECORD: torch`, and every torch file is named as owned by no locked "
    "RECORD; `rebuild --fresh` repairs it",
)
def test_record_removed_fails_verify(real: Path, tmp_path: Path) -> None:
    record = next(_real_site(real).glob("torch-*.dist-info")) / "RECORD"
    record.unlink()
    _verify_fails_at_inventory(real, tmp_path / "out", "without a RECORD: torch", "no locked distribution owns")
    assert kd(real, "rebuild", "--fresh").returncode == 0


@pytest.mark.slow
@rel(
    45,
    "a file of the real env hard-linked from another place (as uv's default link mode leaves every file shared with "
    "its cache), then `verify -- --no-rebuild`",
    "rebuilds install with uv's `--no-cache` (no file of a fresh env has a second link); a shared file is refused, "
    "named; `rebuild --fresh` repairs it",
)
def test_shared_file_fails_verify(real: Path, tmp_path: Path) -> None:
    site = _real_site(real)
    regular = [p for p in site.joinpath("torch").rglob("*.py")][:200]
    assert regular and all(p.stat().st_nlink == 1 for p in regular)  # one link each: no cache kept beside the env
    os.link(site / "torch" / "version.py", tmp_path / "linked.py")
    _verify_fails_at_inventory(real, tmp_path / "out", "shared with another place (hard links)", "torch/version.py")
    assert kd(real, "rebuild", "--fresh").returncode == 0


@pytest.mark.slow
@rel(
    43,
    "a same-size edit of a `.py` inside torch in the real env (one byte, mtime put back), then `verify`, then the "
    "TIP it gives (`nox -s rebuild -- --fresh`), then `verify` again",
    "refused at inventory (`changed since the build: torch/functional.py (ctime_ns)`); the fresh rebuild copies "
    "clean files (the installer's cache was never linked to the env, so the edit did not reach it) and the next "
    "verify passes: no loop",
)
def test_same_size_edit_in_torch_then_fresh_rebuild_passes(real: Path, tmp_path: Path) -> None:
    target = _real_site(real) / "torch" / "functional.py"
    clean = target.read_bytes()
    _same_size_edit(target)
    _verify_fails_at_inventory(real, tmp_path / "bad", "changed since the build", "torch/functional.py (ctime_ns")
    assert kd(real, "rebuild", "--fresh").returncode == 0
    assert (_real_site(real) / "torch" / "functional.py").read_bytes() == clean
    proc = kd(real, "verify", "--no-rebuild", "--out", str(tmp_path / "good"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    inv = next(s for s in read_report(tmp_path / "good")["steps"] if s["name"] == "inventory")  # type: ignore[union-attr]
    assert inv["status"] == "passed" and inv["details"]["files"]["snapshot"] == "compared"


def test_report_details_are_bounded_and_counted() -> None:
    found = envfiles.Findings(entries=5, added=[f"lib/x{i}.py" for i in range(300)], changed={"a": "mode"})
    data = found.as_dict()
    assert len(data["added"]) == envfiles.DETAILS_LIMIT < 300  # type: ignore[arg-type]
    assert data["counts"] == {"foreign": 0, "shared": 0, "added": 300, "removed": 0, "changed": 1}
    assert not found.clean and found.problems() == [
        "added since the build: lib/x0.py, lib/x1.py, lib/x2.py (+297 more)", "changed since the build: a (mode)"]


# --- the inventory step's record (what report.json says; the claims are built from it) ------------------------------


def _step_on(env: Path, lock: lockfile.Lockfile, tmp_path: Path, *, intentional: bool = False,
             strict: bool = False) -> tuple[dict[str, object], list[str], str]:
    import tempfile
    from types import SimpleNamespace

    from kernodeck.verify.pipeline import Run, drive
    from kernodeck.verify.steps import STEPS

    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=tmp_path))  # this call's own: what it wrote, alone
    run_ = Run(None, None, tmp_path)  # type: ignore[arg-type]
    run_.lock, run_.python = lock, env / "bin" / "python"
    ctx: Any = SimpleNamespace(opts=SimpleNamespace(python="python" if intentional else None, strict=strict),
                               staging=staging)
    drive(ctx, run_, [entry for entry in STEPS if entry.name == "inventory"])  # the step as verify's loop runs it
    step = run_.steps[-1]
    if "vs_lock" in step.details:  # observed, passed or not: what was seen is the dossier's evidence
        assert (staging / "inventory.txt").is_file(), "the observed inventory was not written"
    return {"status": str(step.status), **step.details}, run_.not_established, str(run_.error or "")


def _fake_env_runnable(tmp_path: Path) -> tuple[Path, lockfile.Lockfile]:
    import sys

    env, lock = _fake_env(tmp_path)
    cfg = env / "pyvenv.cfg"
    cfg.write_text(f"home = {Path(sys._base_executable).parent}\ninclude-system-site-packages = false\n"
                   f"version_info = {sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}\n")
    # the snapshot was taken with the earlier pyvenv.cfg: seal again
    from types import SimpleNamespace

    (env / snapshot.SNAPSHOT).unlink()
    sealed = sealing.seal(env, lock, {}, SimpleNamespace(id="tiny"))  # type: ignore[arg-type]
    # bound to its lock as a build records it (a uv build: the pin's hashes its install verified)
    sealed.update(binding.record(lock, binding.from_verified(lock), binding.HashSource.VERIFIED))
    (env / envdirs.MARKER).write_text(json.dumps(sealed))
    return env, lock


def test_inventory_step_records_the_file_claim(tmp_path: Path) -> None:
    env, lock = _fake_env_runnable(tmp_path)
    details, missing, failure = _step_on(env, lock, tmp_path)
    assert details["status"] == "passed" and failure == "" and missing == []
    files = details["files"]
    assert files["snapshot"] == "compared" and set(files["counts"].values()) == {0}  # type: ignore[index,union-attr]
    assert files["foreign"] == [] and files["without_record"] == [] and files["shared"] == []  # type: ignore[index]
    assert "files, unchanged since the build" in str(details["summary"])
    # a dropped sitecustomize that breaks the interpreter's report: the files are named, not the broken report
    site = _site(env)
    (site / "sitecustomize.py").write_text("print('garbage')\n")
    details, _, failure = _step_on(env, lock, tmp_path)
    assert details["status"] == "failed" and "sitecustomize.py" in failure and "no locked distribution owns" in failure


def test_inventory_step_for_an_existing_interpreter(tmp_path: Path) -> None:
    env, lock = _fake_env_runnable(tmp_path)
    details, missing, failure = _step_on(env, lock, tmp_path, intentional=True)
    assert details["status"] == "passed" and missing == [] and failure == ""  # built by Kernodeck: files held too
    assert details["bound_to_lock"] is True  # ... and its build held to the lock (red-team pass 36, BIND1)
    record = json.loads((env / envdirs.MARKER).read_text())
    (env / envdirs.MARKER).write_text(json.dumps({k: v for k, v in record.items() if k != binding.WHEELS}))
    details, missing, failure = _step_on(env, lock, tmp_path, intentional=True)  # a build that records no binding
    assert details["status"] == "passed" and details["bound_to_lock"] is False and failure == ""
    assert len(missing) == 1 and "a Kernodeck build, but its build recorded no lock body digest" in missing[0]
    (env / envdirs.MARKER).write_text(json.dumps(record))
    (_site(env) / "extra_mod.py").write_text("X = 1\n")
    details, missing, failure = _step_on(env, lock, tmp_path, intentional=True)
    assert details["status"] == "passed" and len(missing) == 1 and "extra_mod.py" in missing[0]
    assert "read only declared inputs: the closed world trusts every read inside the environment" in missing[0]
    details, _, failure = _step_on(env, lock, tmp_path, intentional=True, strict=True)
    assert details["status"] == "failed" and "extra_mod.py" in failure
    (env / snapshot.SNAPSHOT).unlink()  # an interpreter Kernodeck did not build: nothing to hold its files to
    details, missing, failure = _step_on(env, lock, tmp_path, intentional=True)
    assert details["status"] == "passed" and "files" not in details
    assert len(missing) == 1 and "no build snapshot" in missing[0] and "read only declared inputs" in missing[0]
