"""Red-team pass 74 (issue 29): the pass-73 fixes, by class ("no code of the env runs between install and seal").

PIPCODE1 (kernodeck/env/rebuild.py ``run``/``check_and_freeze``, env/inventory.py ``check_and_freeze_argv``): when
the lock pins pip, the build's freeze/check process runs the env's OWN pip (``[python, -I, -m, pip]``, the env's site
folder on the path after the standard library): every pip module it imports is read from the env, where a declared
built-here pin's wheel may have written files into pip's package folder. tinyd (declared) ships
``pip/_internal/commands/__pycache__/check.cpython-3XX.pyc``, an unchecked hash-based pyc (a new file: no other pin's
file is overwritten; a fresh env's pip has no bytecode): Python loads it in place of check.py's source, unchecked.
There it rewrites tinya (a wheel pin) and its RECORD line, removes itself and its RECORD line, then runs the real
check.py so pip goes on. Premise: such a pyc runs in check_and_freeze_argv's process. Control: the same pyc under a
module name pip does not import does not run. Attack (pip and uv): the env promoted must hold tinya's wheel.

OPTIMPORT1 (env/inventory.py ``_BOTH``): STDSHADOW1's fix appends the env's site folders after the standard library,
so a module named like a standard one is not reached; but pip (and the stdlib itself) try top-level names the
standard library does NOT have, each in a ``try: import ... except ImportError`` (measured in that process, pip 23.2.1
from the env or from ensurepip's wheel alike: ``socks``, ``attr``, ``org`` (copy.py's Jython probe),
``urllib3_secure_extra``, ``cPickle``, ``winreg``, ``nt``, ``msvcrt``, ``_winapi``): each is looked up in the env's
site folders. tinyd (declared) ships a top-level ``socks.py``: there it rewrites tinya and its RECORD line, removes
itself, and raises ImportError as the absent module would. Premise: ``socks.py`` runs in check_and_freeze_argv's
process, with the env's pip and with the wheel's. Control: ``socksx.py`` does not. Attack (pip and uv): the env
promoted must hold tinya's wheel.

Fixed by class (kernodeck/env/envpip.py): the pip that reads a build is never the env's own when another is at hand
(Kernodeck's pip, or ensurepip's wheel); the env's site folders stay on sys.path for the distributions' metadata, but
no module is imported from them (a top-level name found only there is absent). Each attack is now a plain test; the
premises show the doors on the earlier forms (the env's pip; the folders only appended).
"""

from __future__ import annotations

import importlib._bootstrap_external as bootstrap
import json
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

# pip/_internal/commands/check.py's bytecode: in the freeze/check process of an env being built (-c, a .venv-rebuild
# site) it rewrites tinya's module and its RECORD line, removes its own pyc and tinyd's RECORD lines for pip/ (or
# writes MARK), then runs the real check.py source.
_PAYLOAD = r'''
import base64, hashlib, os, sys
_site = __file__.split("/pip/_internal/")[0]
def _line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))
if MARK:
    open(MARK, "w").write(" ".join(sys.argv))
elif "/.venv-rebuild/" in _site and sys.argv[:1] == ["-c"]:
    data = REACHED.encode()
    open(os.path.join(_site, "tinya", "__init__.py"), "wb").write(data)
    record = os.path.join(_site, "tinya-1.0.dist-info", "RECORD")
    lines = open(record).read().splitlines()
    open(record, "w").write("".join((_line("tinya/__init__.py", data) if l.startswith("tinya/__init__.py,") else l)
                                    + "\n" for l in lines))
    os.unlink(__cached__)
    record = os.path.join(_site, "tinyd-1.0.dist-info", "RECORD")
    lines = open(record).read().splitlines()
    open(record, "w").write("".join(l + "\n" for l in lines if not l.startswith("pip/")))
exec(compile(open(__file__).read(), __file__, "exec"), globals())
'''

NONCE = "0f" * 16  # the nonce of the separator lines (envpip.nonce draws one per process)


def _payload(mark: str = "") -> str:
    return _PAYLOAD.replace("MARK", repr(mark)).replace("REACHED", repr(_REACHED.decode()))


def _pyc(source: str) -> bytes:
    """An unchecked hash-based pyc of ``source``: loaded whatever its source file holds."""
    return bootstrap._code_to_hash_pyc(compile(source, "check.py", "exec"), b"\0" * 8, checked=False)


def _venv_with(tmp_path: Path, module: str) -> tuple[Path, Path]:
    python = fresh_venv(tmp_path / "v", with_pip=True)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    cache = site / "pip" / "_internal" / "commands" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / f"{module}.{sys.implementation.cache_tag}.pyc").write_bytes(_pyc(_payload(str(tmp_path / "ran"))))
    if module != "check":
        (cache.parent / f"{module}.py").write_text("", encoding="utf-8")
    return python, tmp_path / "ran"


def test_pipcode1_premise_a_pyc_in_the_envs_pip_runs_in_the_freeze_and_check_process(tmp_path: Path) -> None:
    python, marker = _venv_with(tmp_path, "check")
    argv = check_and_freeze_argv([str(python), "-I", "-m", "pip"], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), cwd=tmp_path)
    assert out.returncode == 0 and split_check_and_freeze(out.stdout, NONCE)[2:] == (0, 0)
    assert marker.read_text(encoding="utf-8").startswith("-c")  # the pyc ran there, and pip went on


def test_pipcode1_control_a_pyc_of_a_module_pip_does_not_import_does_not_run(tmp_path: Path) -> None:
    python, marker = _venv_with(tmp_path, "checkx")
    argv = check_and_freeze_argv([str(python), "-I", "-m", "pip"], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), cwd=tmp_path)
    assert out.returncode == 0 and split_check_and_freeze(out.stdout, NONCE)[2:] == (0, 0)
    assert not marker.exists()


def _declared(tmp_path: Path, payload: bool) -> tuple[Path, dict[str, str]]:
    """The tiny lock (pip, tinya, tinyb wheels; tinyd by its sdist, declared built-here, built by tinybuild);
    ``payload``: tinyd's wheel also carries pip's check.py bytecode (PIPCODE1), compiled by the build."""
    entry = '             f"{info}/METADATA":'
    assert entry in SDIST_BACKEND
    backend = SDIST_BACKEND
    if payload:
        backend = ("import importlib._bootstrap_external as _be, sys as _sys\n"
                   f"_PYC = _be._code_to_hash_pyc(compile({_payload()!r}, 'check.py', 'exec'), b'0' * 8, False)\n"
                   + backend.replace(entry, '             "pip/_internal/commands/__pycache__/check." + '
                                            '_sys.implementation.cache_tag + ".pyc": _PYC,\n' + entry))
    project, _, env = declared_tinyd(tmp_path, backend)
    return project, env


# The control, a declared build staying in its pin promotes the lock's tinya (pip): test_redteam72's, the same
# build.


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_pipcode1_no_bytecode_of_a_declared_pin_runs_in_the_envs_pip_before_the_seal(tmp_path: Path,
                                                                                     installer: str) -> None:
    """tinyd (declared built-here) ships pip's check.py bytecode: in the build's freeze/check process it rewrites
    tinya (a wheel pin) and its RECORD line. The env promoted must hold tinya's wheel."""
    project, env = _declared(tmp_path, payload=True)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    assert proc.returncode in (0, 2), proc.stderr[-800:]
    assert promoted is None or tinya_bytes(promoted) != _REACHED, \
        f"promoted with tinya {_REACHED!r} (rc {proc.returncode}), bound to {bound(promoted)}"
    if promoted is not None:  # read by Kernodeck's pip, though the lock pins pip
        record = json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))
        commands = " | ".join(record["commands"])
        assert "kernodeck/pip-" in commands and "-m pip" not in commands, commands


# OPTIMPORT1 -------------------------------------------------------------------------------------------------------

# A top-level socks.py (a name pip's vendored urllib3 tries and the standard library lacks): in the freeze/check
# process of an env being built it rewrites tinya and its RECORD line, removes itself (source, bytecode and its
# folder, RECORD line), then raises ImportError as the absent module would (or writes MARK).
_SOCKS = r"""
import base64, hashlib, os, sys
_site = os.path.dirname(os.path.abspath(__file__))
def _line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))
if MARK:
    open(MARK, "w").write(" ".join(sys.argv))
elif "/.venv-rebuild/" in _site and sys.argv[:1] == ["-c"]:
    data = REACHED.encode()
    open(os.path.join(_site, "tinya", "__init__.py"), "wb").write(data)
    record = os.path.join(_site, "tinya-1.0.dist-info", "RECORD")
    lines = open(record).read().splitlines()
    open(record, "w").write("".join((_line("tinya/__init__.py", data) if l.startswith("tinya/__init__.py,") else l)
                                    + "\n" for l in lines))
    for path in (__file__, __cached__ or ""):
        if path and os.path.exists(path):
            os.unlink(path)
    if __cached__ and not os.listdir(os.path.dirname(__cached__)):
        os.rmdir(os.path.dirname(__cached__))
    record = os.path.join(_site, "tinyd-1.0.dist-info", "RECORD")
    lines = open(record).read().splitlines()
    open(record, "w").write("".join(l + "\n" for l in lines if not l.startswith("socks.py,")))
raise ImportError("No module named 'socks'")
"""


def _socks(mark: str = "") -> str:
    return _SOCKS.replace("MARK", repr(mark)).replace("REACHED", repr(_REACHED.decode()))


# The pass-73 form of the freeze/check process: the env's site folders appended to sys.path, nothing more.
_APPENDED = ("import sys\nsys.path += sys.argv[1:]\nfrom pip._internal.cli.main import main\n"
             "for args in (['freeze', '--all'], ['check']):\n    main(args)\n")


@pytest.mark.parametrize("from_wheel", [False, True])
def test_optimport1_premise_a_top_level_socks_runs_where_the_site_folders_are_only_appended(tmp_path: Path,
                                                                                            from_wheel: bool) -> None:
    """pip run from the env (a lock pinning pip) or from ensurepip's wheel (one that does not): the same."""
    python = fresh_venv(tmp_path / "v", with_pip=True)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    (site / "socks.py").write_text(_socks(str(tmp_path / "ran")), encoding="utf-8")
    lead = [f"{bundled_pip(sys.executable)}"] if from_wheel else []
    out = subprocess.run([str(python), "-I", "-S", "-c", _APPENDED, *lead, str(site)], capture_output=True,
                         text=True, env=offline_env(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-800:]
    assert (tmp_path / "ran").read_text(encoding="utf-8").startswith("-c")


@pytest.mark.parametrize("reader", ["env", "wheel", "kernodeck"])
def test_optimport1_no_module_of_the_env_runs_in_the_freeze_and_check_process(tmp_path: Path, reader: str) -> None:
    """The process as the build runs it, whichever pip reads (the env's own, a base without ensurepip's wheel and a
    Python Kernodeck's pip refuses; the wheel; Kernodeck's): the env's distributions are read, its socks.py never."""
    python = fresh_venv(tmp_path / "v", with_pip=True)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    (site / "socks.py").write_text(_socks(str(tmp_path / "ran")), encoding="utf-8")
    tool = tool_pip(f"{sys.version_info[0]}.{sys.version_info[1]}")
    assert tool is not None
    lead = {"env": ["-m", "pip"], "wheel": [f"{bundled_pip(sys.executable)}/pip"], "kernodeck": [str(tool)]}[reader]
    argv = check_and_freeze_argv([str(python), "-I", *lead], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), cwd=tmp_path)
    freeze, _, froze, checked = split_check_and_freeze(out.stdout, NONCE)
    assert out.returncode == 0 and (froze, checked) == (0, 0), out.stderr[-800:]
    assert "pip==" in freeze  # the env's distributions are read ...
    assert not (tmp_path / "ran").exists()  # ... none of its modules imported


def test_optimport1_control_another_top_level_name_does_not_run(tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "v", with_pip=True)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    (site / "socksx.py").write_text(_socks(str(tmp_path / "ran")), encoding="utf-8")
    argv = check_and_freeze_argv([str(python), "-I", "-m", "pip"], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), cwd=tmp_path)
    assert out.returncode == 0 and split_check_and_freeze(out.stdout, NONCE)[2:] == (0, 0)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_optimport1_no_top_level_module_of_a_declared_pin_runs_before_the_seal(tmp_path: Path,
                                                                               installer: str) -> None:
    """tinyd (declared built-here) ships a top-level ``socks.py``: in the build's freeze/check process it rewrites
    tinya (a wheel pin) and its RECORD line. The env promoted must hold tinya's wheel."""
    entry = '             f"{info}/METADATA":'
    backend = f"_SOCKS = {_socks().encode()!r}\n" + SDIST_BACKEND.replace(
        entry, '             "socks.py": _SOCKS,\n' + entry)
    project, _, env = declared_tinyd(tmp_path, backend)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    assert proc.returncode in (0, 2), proc.stderr[-800:]
    assert promoted is None or tinya_bytes(promoted) != _REACHED, \
        f"promoted with tinya {_REACHED!r} (rc {proc.returncode}), bound to {bound(promoted)}"
