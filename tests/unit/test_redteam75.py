"""Red-team pass 75 (issue 29): envpip (f682cc4), by class ("no code of the env runs between install and seal").

VCSFREEZE1 (kernodeck/env/envpip.py, the freeze/check process): pip freeze reads each distribution's
``direct_url.json``; one that says "editable" (``dir_info.editable``) at a folder is written as ``-e`` from that
folder's version control: pip starts the VCS tool of this machine (``git``, ``hg``, ``svn``, ``bzr``, found on PATH)
with its working folder there. The folder, its ``.git``/``.hg`` and the ``direct_url.json`` may be a declared
built-here pin's (its wheel writes what its build decides; here an extra ``zzhg-1.0.dist-info`` and ``zzhg/``, all
listed in tinyd's RECORD). Mercurial runs the repository's own hooks (``.hg/hgrc`` ``[hooks] pre-config = ...``,
trusted as the folder is the user's): measured with Mercurial 7.2.4 (pip from PyPI), both readers (Kernodeck's pip
26.3, ensurepip's 23.2.1): pip runs ``hg config paths.default`` there and the hook runs, a child of the freeze/check
process, after the install, before the seal. The hook rewrites tinya (a wheel pin) and its RECORD line, removes zzhg's
files and their RECORD lines; freeze's ``-e`` line for zzhg has no name parse_freeze can read (``## !! Could not
determine repository location``), so it is left out and the freeze matches the lock.

So that the tests do not need Mercurial installed, ``hg`` on their PATH is a stand-in that does what Mercurial was
measured to do here (``_HG``: the repository found from the working folder up, its ``.hg/hgrc`` ``pre-<command>``
hook run in a shell in the repository's root, then exit 1 as a repository without that setting); where a real ``hg``
is on PATH the premise is also run with it. git (2.39 here) is started the same way (``git config --get-regexp``);
no repository setting of it was found that runs a program for that command (``core.fsmonitor`` does not).

Premise: the hook runs in the freeze/check process of a venv holding such a distribution, whichever pip reads.
Control: the same folder and hook without the ``direct_url.json``: pip never starts hg. Attack (pip and uv): the env
promoted must hold tinya's wheel.
Fix idea by class: pip freeze must start no program (its VCS probing of editables): the freeze read from outside
(inventory's reader of a rebuilt env), or the process given an empty PATH (no VCS tool found: pip writes the ``-e``
line with a comment, which the lock comparison refuses anyway for a pin); a distribution the lock does not name in
the env refused before any reader runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.env.envpip import check_and_freeze_argv, split_check_and_freeze, tool_pip
from kernodeck.env.pythons import bundled_pip
from tests.helpers.project import kd
from tests.helpers.reach import bound, tinya_bytes
from tests.helpers.tinylock import SDIST_BACKEND, declared_tinyd, fresh_venv, offline_env, promoted_env

_REACHED = b"VALUE = 'written by tinyd'"

# Mercurial, as measured (7.2.4): the repository is found from the working folder up; its .hg/hgrc [hooks]
# pre-<command> (the command's own name, not an alias's: pip's `hg showconfig` runs pre-config) runs in a shell, in
# the repository's root, before <command>; `hg showconfig paths.default` without that setting exits 1.
_HG = r'''import configparser, os, subprocess, sys
root = os.getcwd()
while not os.path.isdir(os.path.join(root, ".hg")):
    if os.path.dirname(root) == root:
        sys.exit(255)
    root = os.path.dirname(root)
config = configparser.RawConfigParser()
config.read(os.path.join(root, ".hg", "hgrc"))
command = sys.argv[1] if len(sys.argv) > 1 else ""
hook = "pre-" + {"showconfig": "config", "debugconfig": "config"}.get(command, command)  # an alias: its command's
if config.has_option("hooks", hook):
    subprocess.run(config.get("hooks", hook), shell=True, cwd=root)
sys.exit(1)
'''

# zzhg/payload.py, run by the hook (the env's own interpreter) in zzhg/: in an env being built (a .venv-rebuild site)
# it rewrites tinya's module and its RECORD line and removes zzhg's files and their lines in tinyd's RECORD (or, given
# MARK, writes its working folder there).
_PAYLOAD = r'''
import base64, hashlib, os, shutil
site = os.path.dirname(os.getcwd())
def _line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))
if MARK:
    open(MARK, "w").write(os.getcwd())
elif "/.venv-rebuild/" in site:
    data = REACHED.encode()
    open(os.path.join(site, "tinya", "__init__.py"), "wb").write(data)
    record = os.path.join(site, "tinya-1.0.dist-info", "RECORD")
    lines = open(record).read().splitlines()
    open(record, "w").write("".join((_line("tinya/__init__.py", data) if l.startswith("tinya/__init__.py,") else l)
                                    + "\n" for l in lines))
    shutil.rmtree(os.path.join(site, "zzhg"))
    shutil.rmtree(os.path.join(site, "zzhg-1.0.dist-info"))
    record = os.path.join(site, "tinyd-1.0.dist-info", "RECORD")
    lines = open(record).read().splitlines()
    open(record, "w").write("".join(l + "\n" for l in lines if not l.startswith(("zzhg/", "zzhg-1.0.dist-info/"))))
'''
# run from <env>/lib/pythonX.Y/site-packages/zzhg: the env's interpreter
_HGRC = "[hooks]\npre-config = ../../../../bin/python -I -S -B payload.py\n"

NONCE = "0f" * 16  # the nonce of the separator lines (envpip.nonce draws one per process)


def _files(site: str, mark: str = "", editable: bool = True) -> dict[str, bytes]:
    """The files of zzhg (relative to the site folder ``site``): its folder, a Mercurial repository with that hook,
    and its dist-info, whose direct_url.json says it is an editable install of that folder."""
    payload = _PAYLOAD.replace("MARK", repr(mark)).replace("REACHED", repr(_REACHED.decode()))
    files = {"zzhg/payload.py": payload.encode(), "zzhg/.hg/requires": b"", "zzhg/.hg/hgrc": _HGRC.encode(),
             "zzhg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: zzhg\nVersion: 1.0\n"}
    if editable:
        files["zzhg-1.0.dist-info/direct_url.json"] = json.dumps(
            {"url": Path(site, "zzhg").as_uri(), "dir_info": {"editable": True}}).encode()
    return files


def _stand_in(folder: Path) -> dict[str, str]:
    """offline_env with ``folder`` holding the stand-in ``hg`` first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hg").write_text(f"#!{sys.executable}\n{_HG}", encoding="utf-8")
    (folder / "hg").chmod(0o755)
    env = offline_env()
    env["PATH"] = os.pathsep.join([str(folder), env.get("PATH", "")])
    return env


def _venv_with_zzhg(tmp_path: Path, editable: bool = True) -> tuple[Path, Path]:
    python = fresh_venv(tmp_path / "v", with_pip=True)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    for path, data in _files(str(site), str(tmp_path / "ran"), editable).items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    return python, site


def _readers(python: Path) -> dict[str, list[str]]:
    tool = tool_pip(f"{sys.version_info[0]}.{sys.version_info[1]}")
    assert tool is not None
    return {"kernodeck": [str(python), "-I", str(tool)],
            "wheel": [str(python), "-I", f"{bundled_pip(sys.executable)}/pip"]}


def _plain(python: Path, reader: str) -> list[str]:
    """pip freeze as a plain process of the env (the form before the fix): the env's own pip, or the wheel's."""
    return [str(python), "-I", *(["-m", "pip"] if reader == "env" else [f"{bundled_pip(sys.executable)}/pip"]),
            "freeze", "--all"]


@pytest.mark.parametrize("reader", ["env", "wheel"])
def test_vcsfreeze1_premise_pip_freeze_starts_hg_in_an_editable_folder_of_the_env_and_its_hook_runs(
        tmp_path: Path, reader: str) -> None:
    python, site = _venv_with_zzhg(tmp_path)
    out = subprocess.run(_plain(python, reader), capture_output=True, text=True, env=_stand_in(tmp_path / "bin"),
                         cwd=tmp_path)
    assert out.returncode == 0 and f"-e {site / 'zzhg'}" in out.stdout, out.stderr[-800:]
    assert (tmp_path / "ran").read_text(encoding="utf-8") == str(site / "zzhg")  # the env's hook ran there


@pytest.mark.skipif(shutil.which("hg") is None, reason="Mercurial is not installed here (the stand-in test runs)")
def test_vcsfreeze1_premise_with_mercurial_itself(tmp_path: Path) -> None:
    python, site = _venv_with_zzhg(tmp_path)
    env = offline_env()
    env["PATH"] = os.pathsep.join([str(Path(str(shutil.which("hg"))).parent), env.get("PATH", "")])
    out = subprocess.run(_plain(python, "wheel"), capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-800:]
    assert (tmp_path / "ran").read_text(encoding="utf-8") == str(site / "zzhg")


@pytest.mark.parametrize("reader", ["kernodeck", "wheel"])
def test_vcsfreeze1_the_reading_process_starts_no_program(tmp_path: Path, reader: str) -> None:
    """envpip's process, hg on its PATH all the same: it never starts (pip's attempt is refused), the hook never
    runs."""
    python, site = _venv_with_zzhg(tmp_path)
    argv = check_and_freeze_argv(_readers(python)[reader], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=_stand_in(tmp_path / "bin"), cwd=tmp_path)
    freeze, _, froze, _ = split_check_and_freeze(out.stdout, NONCE)
    assert out.returncode == 0 and froze == 0, out.stderr[-800:]
    assert not (tmp_path / "ran").exists()  # hg never started: its hook never ran
    assert f"-e {site / 'zzhg'}" in freeze  # still named, as pip names an editable it cannot ask about


def test_vcsfreeze1_control_without_the_editable_record_hg_is_never_started(tmp_path: Path) -> None:
    python, _ = _venv_with_zzhg(tmp_path, editable=False)
    argv = check_and_freeze_argv(_readers(python)["kernodeck"], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=_stand_in(tmp_path / "bin"), cwd=tmp_path)
    freeze, _, froze, checked = split_check_and_freeze(out.stdout, NONCE)
    assert out.returncode == 0 and (froze, checked) == (0, 0), out.stderr[-800:]
    assert "zzhg==1.0" in freeze and not (tmp_path / "ran").exists()


# tinybuild (tinyd's build backend) adds zzhg's files to tinyd's wheel; the site folder of the env being installed is
# read from the installer's command line (an ancestor of the build: pip's interpreter, or uv's --python).
_FIND_SITE = r'''
import glob as _glob, os as _os
def _site():
    pid = _os.getppid()
    while pid > 1:
        for arg in open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0"):
            if "/.venv-rebuild/" in arg and arg.endswith("/bin/python"):
                return _glob.glob(arg[:-len("/bin/python")] + "/lib/python*/site-packages")[0]
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    raise SystemExit("no env being installed")
'''


def _declared(tmp_path: Path, payload: bool) -> tuple[Path, dict[str, str]]:
    backend = SDIST_BACKEND
    if payload:
        start = '    files = {f"{name}/__init__.py"'
        assert start in SDIST_BACKEND
        backend = _FIND_SITE + _zzhg_source() + SDIST_BACKEND.replace(
            start, '    files = {**_ZZHG(_site()), f"{name}/__init__.py"')
    project, _, env = declared_tinyd(tmp_path, backend)
    env["PATH"] = _stand_in(tmp_path / "bin")["PATH"]
    return project, env


def _zzhg_source() -> str:
    """_ZZHG(site): zzhg's files for that site folder, as the build computes them (the attack's, MARK empty), in
    tinyd's wheel's purelib data folder (installed into the site folder; a wheel's second top-level .dist-info is
    refused by pip, and taken by the metadata fallback for the wheel's own)."""
    payload = _PAYLOAD.replace("MARK", repr("")).replace("REACHED", repr(_REACHED.decode()))
    return (f"_PAYLOAD = {payload.encode()!r}\n_HGRC = {_HGRC.encode()!r}\n"
            "def _ZZHG(site):\n"
            "    import json as _json, pathlib as _pathlib\n"
            "    data = 'tinyd-1.0.data/purelib/'\n"
            "    return {data + 'zzhg/payload.py': _PAYLOAD, data + 'zzhg/.hg/requires': b'',\n"
            "            data + 'zzhg/.hg/hgrc': _HGRC,\n"
            "            data + 'zzhg-1.0.dist-info/METADATA':\n"
            "                b'Metadata-Version: 2.1\\nName: zzhg\\nVersion: 1.0\\n',\n"
            "            data + 'zzhg-1.0.dist-info/direct_url.json': _json.dumps({'url': _pathlib.Path(site, 'zzhg')"
            ".as_uri(), 'dir_info': {'editable': True}}).encode()}\n")


# The control, a declared build staying in its pin promotes the lock's tinya (pip): test_redteam72's, the same
# build.


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_vcsfreeze1_no_hook_of_a_declared_pin_runs_in_the_freeze_before_the_seal(tmp_path: Path,
                                                                                installer: str) -> None:
    """tinyd (declared built-here) ships zzhg: an editable record of a Mercurial folder whose hook, run by the hg
    that pip freeze starts there, rewrites tinya (a wheel pin). The env promoted must hold tinya's wheel."""
    project, env = _declared(tmp_path, payload=True)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    assert proc.returncode in (0, 2), proc.stderr[-800:]
    assert promoted is None or tinya_bytes(promoted) != _REACHED, \
        f"promoted with tinya {_REACHED!r} (rc {proc.returncode}), bound to {bound(promoted)}"


# SEPFORGE1 --------------------------------------------------------------------------------------------------------

# A dist-info's direct_url.json (data, no code): a VCS commit_id pip freeze prints as it is, newlines included, after
# the distribution's name. Named "# zzz" it sorts first and parse_freeze reads its line as a comment; what follows
# forges the lock's freeze, both separator lines and a pip check that found nothing. split_check_and_freeze takes the
# first separators: the real freeze and the real check (exit 1) are never read.
_SEP = "--- kernodeck: {} exited 0 ---\n"


def _forged(lines: str) -> dict[str, bytes]:
    commit = f"0\n{lines}{_SEP.format('freeze')}No broken requirements found.\n{_SEP.format('check')}"
    return {"zzz-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: # zzz\nVersion: 1.0\n",
            "zzz-1.0.dist-info/direct_url.json": json.dumps(
                {"url": "file:///x", "vcs_info": {"vcs": "git", "commit_id": commit}}).encode()}


def _venv_broken(tmp_path: Path, forged: bool) -> Path:
    """A venv (pip, setuptools) with brk 1.0 requiring a distribution it lacks (pip check exits 1), and (``forged``)
    the forging zzz."""
    python = fresh_venv(tmp_path / "v", with_pip=True)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    files = {"brk-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: brk\nVersion: 1.0\n"
                                           b"Requires-Dist: missingdep>=1\n", "brk-1.0.dist-info/RECORD": b""}
    if forged:
        pins = subprocess.run([str(python), "-I", "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                              env=offline_env(), check=True).stdout
        files |= _forged(pins)
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    return python


def test_sepforge1_control_the_split_reads_a_failed_check(tmp_path: Path) -> None:
    python = _venv_broken(tmp_path, forged=False)
    argv = check_and_freeze_argv(_readers(python)["kernodeck"], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), cwd=tmp_path)
    _, check, froze, checked = split_check_and_freeze(out.stdout, NONCE)
    assert (froze, checked) == (0, 1) and "missingdep" in check


@pytest.mark.parametrize("reader", ["kernodeck", "wheel"])
def test_sepforge1_no_dist_info_makes_the_split_read_a_check_the_process_did_not_run(tmp_path: Path,
                                                                                    reader: str) -> None:
    python = _venv_broken(tmp_path, forged=True)
    argv = check_and_freeze_argv(_readers(python)[reader], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), cwd=tmp_path)
    assert out.returncode == 0 and f"--- kernodeck {NONCE}: check exited 1 ---" in out.stdout  # the real check failed
    _, check, _, checked = split_check_and_freeze(out.stdout, NONCE)
    assert (checked, "missingdep" in check) == (1, True), f"split read check {checked}: {check!r}"


def _declared_broken(tmp_path: Path, forged: bool) -> tuple[Path, dict[str, str]]:
    """tinyd (declared built-here) requires tinymissing (pip check fails); ``forged``: its wheel's purelib data also
    holds zzz's dist-info forging the lock's freeze and a check that found nothing."""
    meta = 'f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n"'
    assert meta in SDIST_BACKEND
    backend = SDIST_BACKEND.replace(meta, meta[:-1] + 'Requires-Dist: tinymissing\\n"')
    if forged:
        lines = "pip==23.2.1\ntinya==1.0\ntinyb==2.0\ntinyd==1.0\n"
        files = {f"tinyd-1.0.data/purelib/{k}": v for k, v in _forged(lines).items()}
        start = '    files = {f"{name}/__init__.py"'
        backend = f"_ZZZ = {files!r}\n" + backend.replace(start, '    files = {**_ZZZ, f"{name}/__init__.py"')
    project, _, env = declared_tinyd(tmp_path, backend)
    return project, env


def test_sepforge1_control_a_declared_build_failing_pip_check_is_not_promoted(tmp_path: Path) -> None:
    project, env = _declared_broken(tmp_path, forged=False)
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode != 0 and "pip-check failed: tinyd 1.0 requires tinymissing" in proc.stderr, proc.stderr
    assert promoted_env(project) is None


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_sepforge1_an_env_failing_pip_check_is_never_promoted(tmp_path: Path, installer: str) -> None:
    project, env = _declared_broken(tmp_path, forged=True)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    record = {} if promoted is None else json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))
    assert promoted is None, f"promoted (rc {proc.returncode}), pip_check recorded: {record.get('pip_check')!r}"
