"""What an env's interpreter reads of the env as it starts, proven before every file is (kernodeck/env/startfiles.py).

The proof holds each entry of the env's top folder and of its ``bin`` to the build's snapshot, and the interpreter to
a link out of the env; each way a start could read something of the env that is not the build's makes it None (the
runner then starts only once every file is proven). The class is checked on a traced start: every file of the env
that a waiting runner opens, lists or executes is one the proof covers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.env import envfiles, start, startfiles
from kernodeck.env.sealing import compile_argv
from kernodeck.env.snapshot import scan
from kernodeck.inenv.protocol import STACKS_DIR_ENV
from kernodeck.verify.steps.in_env import COMPILED, COMPILED_SHA256
from tests.helpers import basevenv


def _built(tmp_path: Path) -> tuple[Path, Path, dict[str, list[object]]]:
    """A venv with Kernodeck's compiled in-env files at its top, as a rebuild leaves it; the env, its interpreter, its
    snapshot's entries."""
    python = basevenv.venv(tmp_path)
    env = python.parent.parent
    _compiled(env)
    return env, python, scan(env)


def _compiled(env: Path) -> str:
    """Kernodeck's in-env files compiled into ``env`` as the rebuild does it; the digest the compile prints."""
    return subprocess.run(compile_argv(str(basevenv.BASE), env), check=True, capture_output=True, text=True,
                          timeout=120).stdout.split()[-1]


def test_the_builds_start_files_are_proven(tmp_path: Path) -> None:
    """The control: nothing changed since the snapshot; the proof holds the top folder's and bin's entries, no
    deeper one."""
    env, python, built = _built(tmp_path)
    proof = startfiles.proven(env, python, built)
    assert proof is not None and {"pyvenv.cfg", "bin", "bin/python", envfiles.COMPILED} <= set(proof), proof
    assert not [rel for rel in proof if rel.count("/") > (1 if rel.startswith("bin/") else 0)], sorted(proof)


@pytest.mark.parametrize("change", ["pth-beside-the-interpreter", "pyvenv-cfg-rewritten", "added-at-the-top",
                                    "compiled-files-rewritten", "interpreter-relinked", "bin-made-a-link"])
def test_a_start_file_not_the_builds_is_not_proven(tmp_path: Path, change: str) -> None:
    """Each change to what a start reads: a ``python._pth`` (it replaces sys.path), ``pyvenv.cfg`` written again
    (its bytes unchanged: the ctime moved), a file added at the top, the compiled in-env files rewritten, the
    interpreter's link pointed elsewhere, ``bin`` swapped for a link to a copy of itself."""
    env, python, built = _built(tmp_path)
    assert startfiles.proven(env, python, built) is not None  # the control
    if change == "pth-beside-the-interpreter":
        (env / "bin" / "python._pth").write_text(str(tmp_path) + "\n")
    elif change == "pyvenv-cfg-rewritten":
        (env / "pyvenv.cfg").write_bytes((env / "pyvenv.cfg").read_bytes())
    elif change == "added-at-the-top":
        (env / "sitecustomize.py").write_text("")
    elif change == "compiled-files-rewritten":
        marshal_file = env / envfiles.COMPILED
        marshal_file.write_bytes(marshal_file.read_bytes())
    elif change == "interpreter-relinked":
        (env / "bin" / "python").unlink()
        (env / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    else:
        shutil.copytree(env / "bin", tmp_path / "bin-copy", symlinks=True)
        (env / "bin").rename(tmp_path / "bin-moved")
        (env / "bin").symlink_to(tmp_path / "bin-copy")
    assert startfiles.proven(env, python, built) is None


def test_a_change_deeper_than_a_start_reads_is_left_to_every_files_proof(tmp_path: Path) -> None:
    """A ``.pth`` dropped into site-packages: not read by a start with ``-S`` (site runs only after the word), so the
    start files stay proven; envfiles.check, which runs next and is never skipped, names it."""
    env, python, built = _built(tmp_path)
    (basevenv.site_packages(python) / "zz.pth").write_text("import os\n")
    assert startfiles.proven(env, python, built) is not None


def test_a_copied_interpreter_is_never_proven_early(tmp_path: Path) -> None:
    """``venv --copies``: the interpreter is a file of the env (its ``$ORIGIN`` the env's ``bin``), so a start runs
    code of the env: only every file's proof may let it run."""
    env, python, _ = _built(tmp_path)
    python.unlink()
    shutil.copy2(basevenv.BASE, python)
    assert startfiles.proven(env, python, scan(env)) is None
    assert startfiles.proven(env, env / "lib" / "python", scan(env)) is None  # not the env's bin


def test_outside_follows_every_link(tmp_path: Path) -> None:
    """The stacks folder and the interpreter: inside the env is named so through a link, outside is outside."""
    env, python, _ = _built(tmp_path)
    (tmp_path / "into-env").symlink_to(env / "lib")
    assert startfiles.outside(env, python) and startfiles.outside(env, tmp_path)
    assert not startfiles.outside(env, env / "lib") and not startfiles.outside(env, tmp_path / "into-env")


def test_outside_sees_the_env_by_inode_where_no_path_says_so(tmp_path: Path) -> None:
    """With the snapshot's entries: a hard link outside the env to a file of it (and a folder below a place that is
    an env folder by device and inode, as a bind mount makes one) is inside; the control, without them, goes by the
    path only."""
    env, python, _ = _built(tmp_path)
    linked = tmp_path / "elsewhere" / "python"
    linked.parent.mkdir()
    os.link(env / "pyvenv.cfg", linked)
    built = scan(env)
    assert startfiles.outside(env, linked) and not startfiles.outside(env, linked, built=built)
    assert startfiles.outside(env, tmp_path / "elsewhere", built=built)
    assert startfiles.outside(env, python, built=built)


def test_a_stacks_folder_inside_the_env_is_never_proven_early(tmp_path: Path) -> None:
    """``writes``: where the start writes before its word (the run's stacks folder) must lie outside the env."""
    env, python, built = _built(tmp_path)
    assert startfiles.proven(env, python, built, (tmp_path,)) is not None  # the control
    assert startfiles.proven(env, python, built, (basevenv.site_packages(python),)) is None


def test_scan_within_lists_only_those_folders(tmp_path: Path) -> None:
    env, _, _ = _built(tmp_path)
    whole, within = scan(env), scan(env, within=startfiles.FOLDERS)
    assert set(within) < set(whole) and all(whole[rel] == entry for rel, entry in within.items())
    assert {rel for rel in whole if "/" not in rel or re.fullmatch(r"bin/[^/]+", rel)} == set(within)


@pytest.mark.parametrize(("name", "value", "quiet"), [
    ("PATH", "/usr/bin", True), ("HOME", "/root", True), ("TMPDIR", "/tmp", True), ("OMP_NUM_THREADS", "2", True),
    ("CUDA_VISIBLE_DEVICES", "0", True), ("TORCHINDUCTOR_CACHE_DIR", "/x", True), ("MALLOC_ARENA_MAX", "2", True),
    ("LANG", "C.UTF-8", True), ("LANGUAGE", "en_US:en", True), ("LC_ALL", "en_US.UTF-8", True), ("TZ", "UTC", True),
    ("TZ", "Europe/Amsterdam", True), ("PYTHONHASHSEED", "0", True),
    # ld.so's, glibc's and OpenSSL's paths, Python's bytecode folder, a locale or zone given as a path, a declared one
    ("LD_LIBRARY_PATH", "/x", False), ("LD_AUDIT", "a.so", False), ("GCONV_PATH", "/g", False),
    ("OPENSSL_CONF", "/x/ssl.cnf", False), ("OPENSSL_MODULES", "/x", False), ("PYTHONPYCACHEPREFIX", "/x", False),
    ("TZ", ":/x/Zone", False), ("TZ", "../../x/Zone", False), ("TZDIR", "/x", False), ("LC_ALL", "/x/locale", False),
    ("LANGUAGE", "../x", False), ("MY_PROJECT_SETTING", "1", False),
])
def test_what_a_start_may_read_a_file_by(name: str, value: str, quiet: bool) -> None:
    """An allow-list: where a variable not on it is set, the runner waits for every file's proof (it may name a folder
    of the env). PYTHONHASHSEED is the run's own setting (``own``)."""
    assert start.read_at_start({name: value}, own=("PYTHONHASHSEED",)) == ([] if quiet else [name])


# --- the class: what a waiting runner's start touches of the env -----------------------------------------------------
CONTENT = {"open", "openat", "openat2", "creat", "execve", "execveat", "name_to_handle_at", "open_by_handle_at"}
# strace -y: a descriptor (AT_FDCWD too) is shown with its path (``3</path>``): a relative path is resolved by it
_CALL = re.compile(r'^\d+\s+(\w+)\((?:(?:AT_FDCWD|\d+)<([^>]*)>)?,?\s*"([^"]*)"')


def _quiet_variables(deep: Path) -> dict[str, str]:
    """Every variable a start may hold and still start on the start files' proof (start.read_at_start), each naming a
    folder deep in the env where it names anything: PLUMBING's, one of each recorded prefix a start does not read."""
    env = {name: str(deep) for name in start.PLUMBING - {STACKS_DIR_ENV}}  # that one, launch sets to the run's folder
    env["PATH"] = f"{deep}{os.pathsep}{os.environ.get('PATH', '')}"
    env.update({prefix if not prefix.endswith("_") else f"{prefix}PROBE": str(deep)
                for prefix in start.RECORDED_PREFIXES if not start.read_at_start({prefix: str(deep)})})
    env.update(LANG="C.UTF-8", TZ="UTC")
    assert start.read_at_start(env) == [], start.read_at_start(env)
    return env


def _touched(tmp_path: Path, word: str, variables: bool = False) -> list[tuple[str, str]]:
    """The runner started as verify starts it on the start files' proof (``-S``, ``--wait``, the compiled in-env
    files with their digest), traced, given ``word``; with ``variables``, every one a start may hold (each naming a
    folder deep in the env): each call naming a path of the env, (call, path under env)."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not on PATH")
    python = basevenv.venv(tmp_path)
    env = python.parent.parent
    digest = _compiled(env)
    argv = basevenv.runner_argv(python, tmp_path)
    at = argv.index("--config")
    argv[at:at] = [COMPILED, str(env / envfiles.COMPILED), COMPILED_SHA256, digest]
    trace = tmp_path / "trace.txt"
    extra = _quiet_variables(basevenv.site_packages(python)) if variables else {}
    done = basevenv.run(["strace", "-f", "-qq", "-y", "-s", "4096", "-e", "trace=%file,%desc", "-o", str(trace),
                         *argv], tmp_path, word, env=extra)
    assert done.returncode == 0, done.stderr[-2000:]
    root, touched = str(env), []
    for line in trace.read_text(errors="replace").splitlines():
        match = _CALL.match(line)
        if match and match.group(3):
            path = os.path.normpath(os.path.join(match.group(2) or str(tmp_path), match.group(3)))
            if path == root or path.startswith(root + os.sep):
                touched.append((match.group(1), os.path.relpath(path, root).replace(os.sep, "/")))
    return touched


@pytest.mark.parametrize("variables", [False, True], ids=["bare", "every-quiet-variable-naming-the-env"])
def test_a_waiting_runner_opens_nothing_of_the_env_the_proof_does_not_cover(tmp_path: Path, variables: bool) -> None:
    """Every file of the env the runner opens (reads, lists) or executes before its word is an entry of the proof's
    folders (or the env's top folder itself); deeper paths it may only stat or read a link of (realpath's steps:
    no file's bytes, nothing run). With every variable the allow-list lets a start hold set to a folder deep in the
    env, the same. The control: told to go, it opens site-packages (``site``), which the proof does not cover: the
    trace sees such reads."""
    before = _touched(tmp_path / "wait", "", variables)
    opened = sorted({rel for call, rel in before if call in CONTENT})
    assert "pyvenv.cfg" in opened and envfiles.COMPILED in opened, opened  # the trace works
    assert [rel for rel in opened if rel != "." and os.path.dirname(rel) not in startfiles.FOLDERS] == [], opened
    after = _touched(tmp_path / "go", "go\n", variables)
    assert [rel for call, rel in after if call in CONTENT and rel.startswith("lib/")], sorted(set(after))


def test_the_trace_sees_a_variable_that_makes_a_start_read_the_env(tmp_path: Path) -> None:
    """The control for the variables: ``TZ`` naming a file deep in the env (not on the allow-list) is opened by the
    waiting runner's start (its ``time`` import): what the allow-list keeps out, the trace would see."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not on PATH")
    python = basevenv.venv(tmp_path)
    zone = basevenv.site_packages(python) / "Zone"
    zone.write_bytes(Path("/usr/share/zoneinfo/UTC").read_bytes() if Path("/usr/share/zoneinfo/UTC").is_file() else b"")
    assert start.read_at_start({"TZ": f":{zone}"}) == ["TZ"]
    trace = tmp_path / "trace.txt"
    done = basevenv.run(["strace", "-f", "-qq", "-y", "-e", "trace=%file", "-o", str(trace),
                         *basevenv.runner_argv(python, tmp_path)], tmp_path, "", env={"TZ": f":{zone}"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(zone) in trace.read_text(errors="replace")
