"""What keeps the everyday commands cheap (issue 16): what a command imports, what a session installs.

No time is asserted here (speed is measured by `nox -s bench`); these tests pin the mechanisms, each with the case
that must still do the work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import packaging
import pytest

from kernodeck import noxsessions
from kernodeck.env import start
from kernodeck.verify.steps.in_env import RUNNER_ENV

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("ssl", "http.client", "urllib.request", "tomlkit", "filelock", "importlib.metadata", "kernodeck.verify",
         "kernodeck.env.rebuild", "kernodeck.runformat", "kernodeck.dossier", "kernodeck.verify.report")


def _modules_after(args: list[str], cwd: Path) -> tuple[int, set[str]]:
    code = ("import json, sys\nfrom kernodeck.__main__ import main\nrc = main(sys.argv[1:])\n"
            "print(json.dumps([rc, sorted(sys.modules)]))")
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, check=False)
    rc, modules = json.loads(proc.stdout.strip().splitlines()[-1])
    return rc, set(modules)


def test_lock_check_imports_neither_the_network_nor_the_other_commands() -> None:
    rc, modules = _modules_after(["lock", "--check"], ROOT)
    assert rc == 0
    assert not modules & set(HEAVY), modules & set(HEAVY)
    # The same process, when it does build the PEP 751 twin's text, does import what that needs: the list above is
    # what laziness saved, not modules that are never used.
    code = ("import sys\nfrom packaging.pylock import Pylock\nfrom packaging.version import Version\n"
            "from kernodeck.lock import pylock\n"
            "pylock.dumps(Pylock(lock_version=Version('1.0'), created_by='x', packages=[]), 'h')\n"
            "print('tomlkit' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "True"


# What verify's own modules do not import: each is needed only by work a verify of a plain env does not do.
NOT_ON_VERIFY = ("tomlkit", "elftools")


def test_verify_imports_neither_the_manifest_writer_nor_the_elf_parser() -> None:
    code = ("import json, sys\nimport kernodeck.__main__, kernodeck.verify, kernodeck.verify.steps, "
            "kernodeck.verify.writer\nprint(json.dumps(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    tops = {name.split(".")[0] for name in json.loads(proc.stdout)}
    assert not tops & set(NOT_ON_VERIFY), tops & set(NOT_ON_VERIFY)
    # the work that needs them still imports them: a manifest written, an ELF object read past its headers
    code = ("import sys, tempfile\nfrom kernodeck.runformat import manifest\nfrom kernodeck.env import extension_scan\n"
            "manifest.render({'id': 'x'})\nwith tempfile.TemporaryFile() as handle:\n"
            "    handle.write(b'\\x7fELF' + bytes(60))\n    extension_scan._linking(handle, 'x')\n"
            "print('tomlkit' in sys.modules, 'elftools' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "True True"


def test_verify_of_an_application_without_url_sources_imports_no_http_client() -> None:
    """prefetch (runbuild.py) imports the fetcher and its urllib.request, http.client and ssl only for a url source:
    this repository's package-source weights need none. Control: the same application with its weights declared as a
    url source (an address nothing answers) does import it and tries the fetch, its failure handed to the in-env side.
    """
    code = ("import dataclasses, sys\nfrom kernodeck.project import app_contract\n"
            "from kernodeck.project.assets import SourceKind\nfrom kernodeck.verify.runbuild import prefetch\n"
            "from pathlib import Path\napp = app_contract.load(Path('.'))\n"
            "config = app.run_config()\nprefetch(app, config)\n"
            "print('kernodeck.project.fetch' in sys.modules, 'urllib.request' in sys.modules)\n"
            "url = {'url': 'http://127.0.0.1:9/w.bin', 'sha256': 'e' * 64}\n"
            "weights = dataclasses.replace(app.weights, kind=SourceKind.URL, declared=url)\n"
            "app = dataclasses.replace(app, weights=weights)\n"
            "config = {'weights': dict(url)}\nprefetch(app, config)\n"
            "print('kernodeck.project.fetch' in sys.modules, 'fetch_error' in config['weights'])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**start.environ(), "KERNODECK_CACHE": str(ROOT / "runs" / ".no-such-cache")})
    assert proc.stdout.split("\n")[:2] == ["False False", "True True"], proc.stdout + proc.stderr


def test_the_command_skips_the_teardown_only_when_no_thread_is_left_to_wait_for(tmp_path: Path) -> None:
    marker = tmp_path / "written-by-the-thread"
    code = ("import atexit, pathlib, sys, threading, time\nfrom kernodeck.exitcodes import end\n"
            "atexit.register(lambda: print('teardown ran'))\nprint('done')\n"
            "if sys.argv[1] == 'thread':\n"
            "    late = lambda: (time.sleep(0.2), pathlib.Path(sys.argv[2]).write_text('x'))\n"
            "    threading.Thread(target=late).start()\n"
            "end(3)")
    alone = subprocess.run([sys.executable, "-c", code, "alone", str(marker)], cwd=ROOT, capture_output=True,
                           text=True, check=False)
    assert alone.returncode == 3 and alone.stdout.split() == ["done"]  # printed (flushed), no teardown
    # a thread Python waits for: the ordinary exit, which lets it finish its work
    waited = subprocess.run([sys.executable, "-c", code, "thread", str(marker)], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    assert waited.returncode == 3 and "teardown ran" in waited.stdout and marker.read_text() == "x"


class _Session:
    """What install_tools uses of a nox session."""

    def __init__(self, location: Path | None) -> None:
        self.virtualenv = type("Venv", (), {"location": str(location) if location else None})()
        self.installed: list[tuple[str, ...]] = []
        self.logged: list[str] = []

    def install(self, *args: str) -> None:
        self.installed.append(args)

    def log(self, message: str) -> None:
        self.logged.append(message)


def test_installed_reads_a_real_venv() -> None:
    """This test's own venv, made by nox's installer: its dist-info names give the versions importlib reports."""
    assert f"packaging=={packaging.__version__}" in noxsessions.installed(Path(sys.prefix))
    assert f"pytest=={pytest.__version__}" in noxsessions.installed(Path(sys.prefix))


def test_session_installs_only_when_a_pinned_tool_is_missing_or_another_version(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for info in ("packaging-26.4.dist-info", "Pip_Tools-7.6.2.dist-info", "uv-0.13.9.dist-info"):
        (site / info).mkdir(parents=True)
    present = ["packaging==26.4", "pip-tools==7.6.2", "uv==0.13.9"]
    session = _Session(tmp_path / "venv")
    assert noxsessions.install_tools(session, present) == []  # type: ignore[arg-type]
    assert session.installed == [] and "not reinstalling" in session.logged[0]
    for wanted in (["packaging==26.5"], [*present, "hashin==1.0.5"], ["packaging"], ["packaging>=26"]):
        session = _Session(tmp_path / "venv")
        missing = noxsessions.install_tools(session, wanted)  # type: ignore[arg-type]
        assert missing and session.installed == [tuple(wanted)], wanted
    session = _Session(None)  # a session without a venv of its own: nothing known, everything installed
    assert noxsessions.install_tools(session, present) == present and session.installed == [tuple(present)]  # type: ignore[arg-type]


def test_only_lock_check_narrows_the_tools() -> None:
    specs = {spec.name: spec for spec in noxsessions.SESSIONS}
    assert noxsessions.tools_kind(specs["lock"], ["--check"]) == "run"
    assert noxsessions.tools_kind(specs["lock"], ["--check", "--all"]) == "run"
    assert noxsessions.tools_kind(specs["lock"], []) == "lock"
    assert noxsessions.tools_kind(specs["lock"], ["--platform", "x", "--resolver", "uv"]) == "lock"
    assert noxsessions.tools_kind(specs["wheelhouse"], ["--check"]) == "wheelhouse"


def test_committed_twins_render_to_the_same_bytes() -> None:
    """The twin of each committed lock, rendered again from the files it places, is byte-identical (no network)."""
    from kernodeck.lock import lockfile, place, pylock
    from kernodeck.lock import twin as lock_twin
    from kernodeck.project.config import load_project
    from kernodeck.project.platforms import resolve_platform

    project = load_project(ROOT)
    checked = 0
    for declared in project.platforms:
        plat = resolve_platform(project, declared.id)
        lock_file, twin = project.lockfiles / plat.lock_name, project.lockfiles / plat.pylock_name
        if not (lock_file.exists() and twin.exists()):
            continue
        text = lock_file.read_text(encoding="utf-8")
        lock_ = lockfile.parse_text(text, lock_file)
        files = place.locate(lock_.pins, plat, [], no_index=True, known=lock_twin.known_files(twin))
        assert pylock.render(lock_, plat, files, text) == twin.read_text(encoding="utf-8"), plat.id
        checked += 1
    assert checked >= 2


# --- the resume check's new process, started early (needs the real env: slow) --------------------------------------

WORKER = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from kernodeck.inenv import resume

root, drops = Path(sys.argv[2]), sys.argv[3:]
idle = resume.Worker()  # never given an order: ended at once, without training
idle.close()
results = {}
for drop in drops:  # each check with a new process of its own, started early, and a folder of its own
    folder = root / (drop or "whole")
    early = resume.Worker()
    time.sleep(1)  # this process does other work meanwhile (the runner: the application's step)
    verdict = resume.check("cpu", 12, 5, folder, (drop,) if drop else (), worker=early)
    results[drop] = {"idle_exit": idle.proc.returncode, "early_exit": early.proc.returncode,
                     "passed": verdict["passed"], "first": verdict["first_diverging_step"],
                     "settings": verdict.get("worker_settings_verified", []),
                     "continued": sorted(p.name for p in folder.glob("continued*.json"))}
print(json.dumps(results))
"""
DROPS = ["", "rng", "optimizer", "sampler"]


@pytest.fixture(scope="module")
def early_workers(built_project: Path, module_tmp: Path) -> dict[str, dict[str, object]]:
    """The four resume checks below, each with its own early-started new process and folder, run by ONE process of
    the real env (torch imported once for the four, not once each): what each check returned, by what it drops."""
    python = built_project / ".venv-rebuild" / "cp311-linux_x86_64-cpu" / "current" / "bin" / "python"
    proc = subprocess.run(start.argv(python, "-c", WORKER, str(built_project), str(module_tmp / "r"), *DROPS),
                          env=start.environ(RUNNER_ENV), cwd=built_project, capture_output=True, text=True,
                          check=False, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, dict[str, object]] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(results) == sorted(DROPS)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("drop", DROPS)
def test_resume_worker_started_early_restores_only_what_the_checkpoint_holds(
    early_workers: dict[str, dict[str, object]], drop: str
) -> None:
    """Started before the checkpoint exists, the new process still restores exactly (bitwise) from a full checkpoint,
    and each negative control (a part of the state dropped) still diverges at the first resumed step."""
    out = early_workers[drop]
    assert out["idle_exit"] == -9 and out["early_exit"] == 0  # the idle one ended at once (SIGKILL), never trained
    assert "deterministic_algorithms" in out["settings"]  # type: ignore[operator]
    if drop:
        assert out["passed"] is False and out["first"] == 6, out  # checkpoint at 5: the next step
        assert out["continued"] == [f"continued-without-{drop}.json"]
    else:
        assert out["passed"] is True and out["first"] is None, out
        assert out["continued"] == ["continued.json"]
