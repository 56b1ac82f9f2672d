"""Red-team pass 88 on ea37c25 (the verify runner started once the files its start reads are proven, before every file
of the env: kernodeck/env/startfiles.py). Each test asserts the correct behaviour, on the tiny project rebuilt with uv.

EARLYSTART1 (code ran before proof; a route to a false PASS): ea37c25 held the early start back only for ``LD_*`` and
the code-loading variables. A project's declared variable set to a folder of the env made the waiting runner load code
planted deeper than the proof reaches: ``OPENSSL_CONF`` (``hashlib`` loads OpenSSL, which reads the config and loads
the provider it names), ``PYTHONPYCACHEPREFIX`` (the bytecode of a standard library module the runner imports before
its word). A provider that removed its own files before every file's proof listed their folder (a folder's size and
times are not compared) left the inventory passing, and the runner, holding it, was given its word. Fixed where it is
decided: the runner starts on the start files' proof only where its environment holds nothing but the variables a
start reads no file by (kernodeck/env/start.py ``read_at_start``, an allow-list); tests/unit/test_startfiles.py traces
a start with each of them naming the env.

EARLYSTART2 (minor, data): ``TZ``/``TZDIR`` or ``LANGUAGE`` naming the env made the waiting runner read a time zone
file there before the proof. Fixed by the same allow-list (a zone's or a locale's name only); its unit tests.

ORCH1 (older, a stated limit): the orchestrator runs with the caller's environment, so the caller's own
``OPENSSL_CONF`` naming the env loads its provider into ``python -m kernodeck verify`` on df20a4c too. The tests below
count only what ran in the runner.
"""

from __future__ import annotations

import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.env.snapshot import scan
from tests.helpers.project import kd
from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, pip_wheel, wheel_of, write_wheel


def _tiny(tmp_path: Path, declared: str, *extra: Path) -> tuple[Path, dict[str, str], Path]:
    """The tiny project declaring ``declared``, rebuilt with uv: (project, environment, the env)."""
    links = tmp_path / "links"
    project, plat = locked_tiny_project(tmp_path / "project",
                                        [pip_wheel(links), write_wheel(links, "tinya", "1.0"), *extra])
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + f'\n[tool.kernodeck.environment]\nvariables = ["{declared}"]\n')
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    built = kd(project, "rebuild", "--installer", "uv", env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    return project, env, current_env(project, plat)


def _provider(folder: Path, marker: Path, *, removes_itself: bool = False) -> Path:
    """An OpenSSL provider in ``folder`` whose constructor, in a process whose command line names runner.py, writes
    ``marker`` (and, ``removes_itself``, deletes its files first), and the config naming it."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the planted provider")
    source = folder.parent / "provider.c"
    gone = f'unlink("{folder}/evil.so"); unlink("{folder}/ssl.cnf");' if removes_itself else ""
    source.write_text(
        "#include <stdio.h>\n#include <fcntl.h>\n#include <string.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void ran(void) {\n"
        "  char c[4096] = {0}; int fd = open(\"/proc/self/cmdline\", O_RDONLY);\n"
        "  int n = fd >= 0 ? read(fd, c, 4095) : 0; if (fd >= 0) close(fd);\n"
        "  for (int i = 0; i < n; i++) if (!c[i]) c[i] = ' ';\n"
        f"  if (!strstr(c, \"runner.py\")) return;\n  {gone}\n"
        f"  FILE *f = fopen(\"{marker}\", \"a\");\n"
        "  if (f) { fprintf(f, \"provider ran in the runner\\n\"); fclose(f); }\n"
        "}\nint OSSL_provider_init(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "evil.so"), str(source)], check=True, timeout=120)
    source.unlink()
    (folder / "ssl.cnf").write_text(
        "openssl_conf = init\n[init]\nproviders = prov\n[prov]\nevil = evil_sect\ndefault = dflt\n"
        f"[dflt]\nactivate = 1\n[evil_sect]\nmodule = {folder / 'evil.so'}\nactivate = 1\n")
    return folder / "ssl.cnf"


def _runner_started(proc: subprocess.CompletedProcess[str]) -> bool:
    return any(line.startswith("$ ") and "runner.py" in line for line in proc.stderr.splitlines())


def test_earlystart1_a_declared_openssl_conf_naming_the_env_never_loads_its_provider_before_the_proof(
        tmp_path: Path) -> None:
    project, env, venv = _tiny(tmp_path, "OPENSSL_CONF")
    marker = tmp_path / "ran"
    folder = next((venv / "lib").glob("python3.*/site-packages")) / "zzplanted"
    folder.mkdir()
    conf = _provider(folder, marker)
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"), env={**env, "OPENSSL_CONF": str(conf)})
    assert proc.returncode != 0 and "zzplanted" in proc.stderr, proc.stderr[-2000:]  # every file's proof refuses
    assert not _runner_started(proc), proc.stderr[-2000:]  # the variable held the start back: never started
    assert not marker.exists(), marker.read_text()


def test_earlystart1_a_declared_pycache_prefix_naming_the_env_never_runs_its_bytecode_before_the_proof(
        tmp_path: Path) -> None:
    """An unchecked-hash ``.pyc`` of ``pprint`` (which the waiting runner imports) under the prefix, in the env."""
    project, env, venv = _tiny(tmp_path, "PYTHONPYCACHEPREFIX")
    marker = tmp_path / "ran"
    home = next(line.split("=", 1)[1].strip() for line in (venv / "pyvenv.cfg").read_text().splitlines()
                if line.startswith("home"))
    stdlib = Path(os.path.realpath(Path(home).parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"))
    prefix = next((venv / "lib").glob("python3.*/site-packages")) / "zzcache"
    target = prefix / str(stdlib).lstrip("/")
    target.mkdir(parents=True)
    source = tmp_path / "planted_pprint.py"
    source.write_text(f"open({str(marker)!r}, 'a').write(' '.join(__import__('sys').argv) + '\\n')\n"
                      f"exec(compile(open({str(stdlib / 'pprint.py')!r}).read(), 'pprint', 'exec'))\n")
    py_compile.compile(str(source), cfile=str(target / f"pprint.{sys.implementation.cache_tag}.pyc"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"),
              env={**env, "PYTHONPYCACHEPREFIX": str(prefix)})
    assert proc.returncode != 0 and "zzcache" in proc.stderr, proc.stderr[-2000:]
    ran = [line for line in (marker.read_text().splitlines() if marker.exists() else []) if "runner.py" in line]
    assert not ran, ran


def test_earlystart1_a_provider_that_removes_itself_never_reaches_a_passed_inventory(tmp_path: Path) -> None:
    """The route to a false PASS: the provider deletes its files from the folder every file's proof lists last; with
    a package of 4000 files it won the race on ea37c25 and the inventory passed. Now it never loads in the runner:
    the inventory names its files."""
    big = wheel_of(tmp_path / "links", "tinybig", "1.0", {f"tinybig/d{i // 100}/f{i}.txt": b"x" for i in range(4000)})
    project, env, venv = _tiny(tmp_path, "OPENSSL_CONF", big)
    marker = tmp_path / "ran"
    folder = venv / list(scan(venv))[-1].rpartition("/")[0]  # the folder the scan lists last
    conf = _provider(folder, marker, removes_itself=True)
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"), env={**env, "OPENSSL_CONF": str(conf)})
    passed = [line for line in proc.stderr.splitlines() if line.startswith("kernodeck: inventory: ok")]
    assert not passed, proc.stderr[-2000:]
    assert proc.returncode != 0 and "evil.so" in proc.stderr, proc.stderr[-2000:]
    assert not marker.exists(), marker.read_text()
