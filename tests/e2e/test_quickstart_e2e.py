"""Issue 25, item 9: start from green, proven, as a new user does it.

README's "Use it in your project" block runs LITERALLY: in an empty git repository, ``pip install nox
/path/to/kernodeck && kernodeck init`` (a venv of its own, this machine's pip configuration as it is: nothing is
written about it), then ``nox -s lock && nox -s reference && nox -s verify`` with no ``KERNODECK_SOURCE``: the
sessions must find the Kernodeck installed beside nox by themselves. That run is made once for the module
(``quick_start``): the template test reads it (the template passes before any edit), the quick start test reads it and
continues in the same project. The same venv then adopts a project whose application is a regression
(examples/regression, ``allclose``), and compares two of its dossiers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.builtenv import example_copy
from tests.helpers.outfolders import tools_bytecode
from tests.helpers.project import ROOT
from tests.helpers.reports import read_report, statuses

pytestmark = pytest.mark.slow
rel = pytest.mark.reliability

LEFT_BEHIND = shutil.ignore_patterns(".nox", ".venv-rebuild", "runs", "__pycache__", ".wheelhouse", "*.egg-info",
                                     "build")


class User:
    """A shell with the venv of ``pip install nox /path/to/kernodeck`` first on PATH, and nothing else set."""

    def __init__(self, work: Path) -> None:
        # a checkout of Kernodeck outside this one (pip builds a folder in place: nothing is written into this one)
        self.checkout = work / "kernodeck"
        self.checkout.mkdir()
        for item in ("pyproject.toml", "README.md", "kernodeck"):
            src = ROOT / item
            if src.is_dir():
                shutil.copytree(src, self.checkout / item, ignore=LEFT_BEHIND)
            else:
                shutil.copy2(src, self.checkout / item)
        self.venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True, timeout=300)
        self.env = {k: v for k, v in os.environ.items() if k not in ("KERNODECK_SOURCE", "PYTHONPATH", "VIRTUAL_ENV")}
        self.env["PATH"] = os.pathsep.join([str(self.venv / "bin"), os.environ["PATH"]])

    def sh(self, cwd: Path, *argv: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=cwd, env=self.env, text=True, capture_output=True, timeout=timeout,
                              check=False)


def _bytecode(project: Path) -> list[Path]:
    """Bytecode in the user's own files (not in the venvs and run folders Kernodeck makes, nor the noxfile's, which
    nox writes as it loads it where PYTHONDONTWRITEBYTECODE is unset: outfolders.tools_bytecode)."""
    made = {".nox", ".venv-rebuild", "runs", ".git"}
    return [p for p in project.rglob("__pycache__/*") if not made & set(p.relative_to(project).parts)
            and not tools_bytecode(p.relative_to(project))]


def test_control_the_bytecode_of_the_users_files_is_found_and_the_noxfiles_is_not(tmp_path: Path) -> None:
    """The check's control: what nox writes for the noxfile is the tool's; a user's module's bytecode, at the root or
    in a folder, is found."""
    for rel in ("__pycache__/noxfile.cpython-311.pyc", "__pycache__/app.cpython-311.pyc",
                "checks/__pycache__/app.cpython-311.pyc", ".nox/verify/__pycache__/x.cpython-311.pyc"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    assert sorted(str(p.relative_to(tmp_path)) for p in _bytecode(tmp_path)) == [
        "__pycache__/app.cpython-311.pyc", "checks/__pycache__/app.cpython-311.pyc"]


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> None:
    tail = f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}):\n{tail}"


@pytest.fixture(scope="module")
def user(module_tmp: Path) -> Iterator[User]:
    work = module_tmp
    shell = User(work)
    # README: pip install nox /path/to/kernodeck && kernodeck init
    _ok(shell.sh(work, "pip", "install", "nox", str(shell.checkout), timeout=900), "pip install nox kernodeck")
    yield shell


@dataclass(frozen=True)
class QuickStart:
    """README's block, run literally in an empty git repository: the project, the verify's dossier, each command's
    finished process (by its README words; the first that failed is the last one run)."""

    project: Path
    dossier: Path
    procs: dict[str, subprocess.CompletedProcess[str]]

    def ok(self, *names: str) -> None:
        for name in names:
            assert name in self.procs, f"{name} never ran: an earlier command failed ({list(self.procs)})"
            _ok(self.procs[name], name)


@pytest.fixture(scope="module")
def quick_start(user: User, module_tmp: Path) -> QuickStart:
    """README's "Use it in your project" run once for this module: `kernodeck init` in an empty git repository, then
    `nox -s lock && nox -s reference && nox -s verify`, stopping at the first command that fails (its readers say
    which). Its readers never change it, but the quick start test, which pytest runs after the template test (file
order) and which continues in the project: a bug in its entry, never in the reference or the dossier read here."""
    project = module_tmp / "my-project"
    project.mkdir()
    dossier = module_tmp / "dossier"
    procs: dict[str, subprocess.CompletedProcess[str]] = {}

    def run(name: str, *argv: str) -> None:
        if all(proc.returncode == 0 for proc in procs.values()):  # nothing after a failed command
            procs[name] = user.sh(project, *argv)

    run("git init", "git", "init", "-q")
    run("kernodeck init", "kernodeck", "init")
    run("nox -s lock", "nox", "-s", "lock")  # as README writes them (tests/unit/test_doc_commands.py)
    run("nox -s reference", "nox", "-s", "reference")
    run("nox -s verify", "nox", "-s", "verify", "--", "--out", str(dossier))
    return QuickStart(project, dossier, procs)


def test_template_from_init_to_a_passing_verify(quick_start: QuickStart) -> None:
    """The template `kernodeck init` writes passes lock, reference and verify before any edit (README: "you start
    from green"): the module's quick start, read."""
    quick_start.ok("git init", "kernodeck init", "nox -s lock", "nox -s reference", "nox -s verify")
    assert (quick_start.project / "dossier" / "reference" / "manifest.toml").is_file()
    report = read_report(quick_start.dossier)
    assert report["status"] == "passed" and set(statuses(report).values()) == {"passed"}


@rel(
    80,
    "README's \"Use it in your project\" run literally: an empty git repository, `pip install nox /path/to/kernodeck "
    "&& kernodeck init`, then `nox -s lock`, `nox -s reference`, `nox -s verify` with no KERNODECK_SOURCE",
    "a passed verify: the sessions install the Kernodeck beside nox (its direct_url.json), no `__pycache__/` left in "
    "the project, provenance says the repository has no commit yet; the user's failing line shown, exit 1 / 2",
)
def test_readme_quick_start_runs_literally(user: User, quick_start: QuickStart, tmp_path: Path) -> None:
    project = quick_start.project
    quick_start.ok("git init", "kernodeck init", "nox -s lock", "nox -s reference", "nox -s verify")
    assert f"install Kernodeck from {user.checkout}" in quick_start.procs["kernodeck init"].stdout
    report = read_report(quick_start.dossier)
    assert report["status"] == "passed" and set(statuses(report).values()) == {"passed"}
    assert not _bytecode(project), "bytecode written into the user's project"
    manifest = tomllib.loads((project / "dossier" / "reference" / "manifest.toml").read_text(encoding="utf-8"))
    assert manifest["provenance"]["commit"].startswith("none (a git repository without commits")
    # warm: the session venvs are reused, Kernodeck not reinstalled (bench/run.py measures the time)
    start = time.perf_counter()
    check = user.sh(project, "nox", "-s", "lock", "--", "--check")
    took = time.perf_counter() - start
    _ok(check, "nox -s lock -- --check")
    assert "Reusing existing virtual environment" in check.stderr + check.stdout
    assert "not reinstalling" in check.stderr + check.stdout, f"{took:.2f}s"
    # exit 2 through nox: an ERROR with a TIP (an --out that would replace the project)
    refused = user.sh(project, "nox", "-s", "verify", "--", "--out", str(project))
    assert refused.returncode == 2 and "TIP: " in refused.stdout + refused.stderr
    # the user's own failing line: a KeyError in the entry, named with its file:line and frames, exit 1
    app = project / "checks" / "app.py"
    text = app.read_text(encoding="utf-8")
    bug = "def _epochs(params: Any) -> int:\n    return int(params['epoch'])\n\n\ndef run(app: Any) -> None:"
    assert text.count("def run(app: Any) -> None:") == 1 and text.count("    params = app.params\n") == 1
    app.write_text(text.replace("def run(app: Any) -> None:", bug).replace(
        "    params = app.params\n", "    params = app.params\n    _epochs(params)\n"), encoding="utf-8")
    # a changed code file stops verify before anything runs, naming it (exit 2; the reference no longer describes it)
    stopped = user.sh(project, "nox", "-s", "verify", "--", "--no-rebuild", "--out", str(tmp_path / "stopped"))
    assert stopped.returncode == 2 and "checks/app.py" in stopped.stderr + stopped.stdout
    assert "TIP: nox -s reference -- --new" in stopped.stderr + stopped.stdout
    # run anyway (never a pass): the entry's own error, with the user's line
    broken = user.sh(project, "nox", "-s", "verify", "--", "--no-rebuild", "--allow-code-change", "--out",
                     str(tmp_path / "broken"))
    said = broken.stdout + broken.stderr
    assert broken.returncode == 1, said[-3000:]
    keyerror = next(line for line in said.splitlines() if "KeyError: 'epoch'" in line and " at " in line)
    assert "checks/app.py:" in keyerror and "in _epochs" in keyerror
    assert "    return int(params['epoch'])" in said  # the user's line, as pytest shows it
    assert "kernodeck_inenv" not in said and "inenv/application.py" not in said  # Kernodeck's frames trimmed
    assert not _bytecode(project)


@rel(
    81,
    "a regression project (examples/regression: an MLP on make_friedman1, `allclose` predictions and `exact` bands) "
    "adopted from a copy, verified twice, then `nox -s compare` between the two dossiers",
    "a passed verify with the R² criterion, and compare judges EVERY declared output under its kind (predictions "
    "allclose, band exact), never 'not compared'",
)
def test_regression_example_adopted_and_compared(user: User, regression_built: Path, tmp_path: Path) -> None:
    # a copy of examples/regression sharing the env the run rebuilt once for it (same lock: verify reuses it)
    project = example_copy(regression_built, tmp_path / "regression")
    first, second = tmp_path / "first", tmp_path / "second"
    _ok(user.sh(project, "nox", "-s", "verify", "--", "--out", str(first)), "nox -s verify")
    report = read_report(first)
    assert report["status"] == "passed" and set(statuses(report).values()) == {"passed"}
    criterion = next(s for s in report["steps"] if s["name"] == "criterion")  # type: ignore[union-attr]
    assert "test R²" in json.dumps(criterion.get("details", {}), ensure_ascii=False)
    _ok(user.sh(project, "nox", "-s", "verify", "--", "--no-rebuild", "--out", str(second)), "nox -s verify again")
    cmp = tmp_path / "cmp"
    _ok(user.sh(project, "nox", "-s", "compare", "--", str(first), str(second), "--out", str(cmp)), "nox -s compare")
    outputs = json.loads((cmp / "compare.json").read_text(encoding="utf-8"))["outputs"]
    declared = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    names = set(declared["tool"]["kernodeck"]["application"]["outputs"])
    assert names == {"predictions", "band"} and set(outputs["per_output"]) == names
    assert outputs["per_output"]["predictions"]["kind"] == "allclose"
    assert outputs["per_output"]["band"]["kind"] == "exact"
    assert all(v["compared"] and v["passed"] for v in outputs["per_output"].values()), outputs
    text = (cmp / "compare.md").read_text(encoding="utf-8")
    assert "not compared" not in text.split("## System")[0]
