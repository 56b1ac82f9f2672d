"""Every shared library mapped into the in-env process is the env's, the base interpreter's, the system's, or declared
(kernodeck/inenv/libraries.py): a copy of a library in a folder ``LD_LIBRARY_PATH`` names (torch's RUNPATH yields to
it) was loaded from outside the env and verify passed.

Each case runs in a new process of this interpreter (its venv stands in for the env), with a copy of the system's
libm under another name in tmp_path as the foreign library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernodeck._fs import inenv_fingerprints
from kernodeck.env import start
from kernodeck.errors import ConfigError
from kernodeck.project.config import validate

ROOT = Path(__file__).resolve().parents[2]
INENV = ROOT / "kernodeck" / "inenv"

CHECK = """
import ctypes, json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
import numpy  # the env's own libraries (numpy.libs) are mapped: accounted for
from kernodeck_inenv import libraries
from kernodeck_inenv._common import CheckFailed, Context
if sys.argv[2]:
    ctypes.CDLL(sys.argv[2])
try:
    libraries.check(Context(config={"libraries": json.loads(sys.argv[3])}, out=Path(".")))
    print(json.dumps({"status": "passed"}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc), "details": exc.details}))
"""


def _libm() -> Path:
    for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                   "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"):
        if Path(folder, "libm.so.6").exists():
            return Path(folder, "libm.so.6")
    pytest.skip("no libm.so.6 in the system's library folders")


def _foreign(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    shutil.copy2(_libm(), folder / "libc10.so")
    return folder


def _check(tmp_path: Path, load: str, declared: list[str], env: dict[str, str]) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON", "LD_"))}
    done = subprocess.run([sys.executable, "-I", "-c", CHECK, str(INENV / "_package.py"), load, json.dumps(declared)],
                          cwd=tmp_path, env={**base, **env}, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_library_found_through_ld_library_path_outside_the_env_fails_naming_it_and_the_variable(
        tmp_path: Path) -> None:
    folder = _foreign(tmp_path)
    result = _check(tmp_path, "libc10.so", [], {"LD_LIBRARY_PATH": str(folder)})
    assert result["status"] == "failed", result
    assert f"libc10.so from {folder} (variable: LD_LIBRARY_PATH)" in result["error"]
    tip = result["details"]["tip"]
    assert "unset LD_LIBRARY_PATH" in tip and 'libraries = ["libc10.so"]' in tip


def test_a_library_loaded_by_path_outside_the_env_fails_and_a_declared_one_passes(tmp_path: Path) -> None:
    library = _foreign(tmp_path) / "libc10.so"
    result = _check(tmp_path, str(library), [], {})
    assert result["status"] == "failed" and "libc10.so from" in result["error"], result
    assert "none names its folder" in result["error"]
    assert _check(tmp_path, str(library), ["libc10.so"], {}) == {"status": "passed"}  # declared by name
    assert _check(tmp_path, str(library), [str(library)], {}) == {"status": "passed"}  # or by path


def test_the_env_the_base_interpreter_and_the_system_libraries_pass(tmp_path: Path) -> None:
    """The controls: what the interpreter, numpy (the env's) and a system library by name map is accounted for."""
    assert _check(tmp_path, "", [], {}) == {"status": "passed"}
    assert _check(tmp_path, str(_libm()), [], {}) == {"status": "passed"}
    assert _check(tmp_path, "libm.so.6", [], {}) == {"status": "passed"}


def test_the_runner_fails_the_step_that_mapped_a_foreign_library(tmp_path: Path) -> None:
    """In the runner, after each step (one that passed or was skipped): LD_PRELOAD maps the copy at the start, so the
    first step fails; the control without it passes that step."""
    library = _foreign(tmp_path) / "libc10.so"
    config = {"steps": ["reference"], "project_root": str(tmp_path), "application": {"sample": "s.jsonl"},
              "reference": None, "inenv_sha256": inenv_fingerprints()}
    (tmp_path / "run-config.json").write_text(json.dumps(config))

    def run(env: dict[str, str]) -> dict[str, Any]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON", "LD_"))}
        subprocess.run([sys.executable, "-I", str(INENV / "runner.py"), "--config",
                               str(tmp_path / "run-config.json")], cwd=tmp_path, env={**base, **env},
                              capture_output=True, text=True, check=False, timeout=120)
        step: dict[str, Any] = json.loads(next((tmp_path / "steps").glob("*reference.json")).read_text())
        return step

    assert run({})["status"] == "skipped"
    step = run({"LD_PRELOAD": str(library)})
    assert step["status"] == "failed" and "libc10.so from" in step["error"] and step["layer"] == "environment"
    assert "(variable: LD_PRELOAD)" in step["error"]


def test_the_run_config_declares_the_libraries_and_the_ld_preload_ones() -> None:
    tool = {"environment": {"libraries": ["/opt/v/libfoo.so"], "ld-preload": ["libjemalloc.so.2"]}}
    assert start.declared_libraries(tool) == ["/opt/v/libfoo.so", "libjemalloc.so.2"]
    assert start.declared_libraries({}) == [] and start.declared_libraries({"environment": {}}) == []


@pytest.mark.parametrize("value", [["libcuda.so.1", "/opt/vendor/lib/libfoo.so"], "libfoo.so", [""], [1]])
def test_the_environment_table_takes_a_list_of_libraries_and_refuses_anything_else(value: object) -> None:
    tool = {"variants": {"cpu": {"backend": "cpu", "torch-layer": "requirements/torch-cpu.in",
                                 "index": "https://download.pytorch.org/whl/cpu"}},
            "environment": {"libraries": value}}
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        validate(tool, Path("pyproject.toml"))
        return
    with pytest.raises(ConfigError, match="libraries"):
        validate(tool, Path("pyproject.toml"))


MAPS = """\
7f00000000-7f00001000 r--p 00000000 08:01 11 /usr/lib/x86_64-linux-gnu/libfoo.so.1
7f00001000-7f00002000 r-xp 00001000 08:01 11 /usr/lib/x86_64-linux-gnu/libfoo.so.1
7f00003000-7f00004000 r-xp 00000000 08:01 12 /tmp/x/libgone.so (deleted)
7f00005000-7f00006000 rw-s 00000000 00:19 13 /dev/shm/sem.soWDZp
7f00007000-7f00008000 r--p 00000000 08:01 14 /tmp/x/libhidden.so
7f00008000-7f00009000 r--s 00000000 08:01 15 /tmp/x/shared.so.bin
7f00009000-7f0000a000 r-xp 00000000 00:00 0 [vdso]
"""


def test_a_file_mapped_only_shared_is_no_library_whatever_its_name() -> None:
    """A POSIX semaphore's random name held ``.so`` (``/dev/shm/sem.soWDZp``, mapped rw-s, tqdm's lock): it failed a
    run as a foreign library. The loader maps a library private; a file mapped only shared is no library. A library
    whose text was remapped to anonymous memory still counts by its private data mapping (libhidden.so: red-team
    pass 86 hid one from a rule that asked for an executable mapping)."""
    from kernodeck.inenv import libraries

    assert libraries.code_files(MAPS) == [
        "/tmp/x/libgone.so", "/tmp/x/libhidden.so", "/usr/lib/x86_64-linux-gnu/libfoo.so.1"]


def test_a_semaphore_mapped_by_a_real_process_is_not_taken_for_a_library(tmp_path: Path) -> None:
    """A file named as the failing run's semaphore, mapped shared in a real process: in its maps by that name (the
    old rule, ``.so`` in the name, took it), not among its libraries; a real library the process loaded is."""
    from kernodeck.inenv import libraries

    sem = tmp_path / "sem.soWDZp"
    sem.write_bytes(b"\0" * 4096)
    script = ("import ctypes, ctypes.util, mmap, sys\n"
              "f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 4096)\n"
              "ctypes.CDLL(ctypes.util.find_library('m'))\n"
              "sys.stdout.write(open('/proc/self/maps').read())\n")
    maps = subprocess.run([sys.executable, "-c", script, str(sem)], capture_output=True, text=True, check=True,
                          timeout=60).stdout
    assert str(sem) in maps and ".so" in sem.name  # the premise: mapped, and the old rule's name
    found = libraries.code_files(maps)
    assert str(sem) not in found
    assert any(os.path.basename(p).startswith("libm.so") for p in found), found


TEXT_TO_ANONYMOUS = """
import ctypes, json, os, shutil, sys
sys.path.insert(0, sys.argv[1])
from kernodeck.inenv import libraries
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
copy = os.path.join(sys.argv[2], "libm.so.6")
shutil.copy(os.path.realpath("/lib/x86_64-linux-gnu/libm.so.6"), copy)
lib = ctypes.CDLL(copy)
lib.cos.restype, lib.cos.argtypes = ctypes.c_double, [ctypes.c_double]

def segments():
    for line in open("/proc/self/maps").read().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].strip() == copy:
            start, end = (int(x, 16) for x in parts[0].split("-"))
            yield start, end, parts[1]

for start, end, perms in [s for s in segments() if "x" in s[2]]:  # the text, copied into anonymous memory in place
    saved = ctypes.string_at(start, end - start)
    assert libc.mmap(start, end - start, 3, 0x02 | 0x10 | 0x20, -1, 0) == start
    ctypes.memmove(start, saved, len(saved))
    assert libc.mprotect(start, end - start, 5) == 0
print(json.dumps({"runs": lib.cos(0.0), "left": sorted({p for _, _, p in segments()}),
                  "named": copy in libraries.code_files(open("/proc/self/maps").read())}))
"""


@pytest.mark.skipif(not Path("/lib/x86_64-linux-gnu/libm.so.6").exists(), reason="x86_64 Debian's libm path")
def test_pass86_a_library_whose_text_was_moved_to_anonymous_memory_is_still_named(tmp_path: Path) -> None:
    """Red-team pass 86, idea 2: a foreign library's text copied over itself into anonymous memory runs on, with no
    executable mapping carrying its path; its data mappings still do, and they are private: it is named."""
    proc = subprocess.run([sys.executable, "-c", TEXT_TO_ANONYMOUS, str(ROOT), str(tmp_path)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["runs"] == 1.0 and not any("x" in p for p in out["left"]) and out["left"], out
    assert out["named"] is True, out
