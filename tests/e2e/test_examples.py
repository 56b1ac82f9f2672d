"""User projects end to end, from copies outside the repository, run as a user runs them: `nox -s ...`.

- the template: `kernodeck init` in an empty git repository, then lock + reference + verify pass before any edit;
- examples/digits: verify passes from a copy, and fails at compare once its reference is perturbed beyond tolerance.

Kernodeck comes from ``$KERNODECK_SOURCE``, a copy of this checkout's distribution files (so nothing is built inside
the checkout). The nox session venvs (the pinned tools + Kernodeck) are shared by every test here through one
``--envdir``, and the uv cache is the user's, as on any machine: only the first test pays for them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file, write_atomic
from kernodeck.dossier import reference
from tests.conftest import ROOT, read_report, statuses

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "digits"
# Never part of a copy: what a run leaves behind.
LEFT_BEHIND = shutil.ignore_patterns(".nox", ".venv-rebuild", "runs", "__pycache__", ".wheelhouse")


class Nox:
    """`nox` as a user's shell runs it: this machine's package sources come from pip's own config (never an
    argument), Kernodeck from $KERNODECK_SOURCE, the session venvs from one shared envdir."""

    def __init__(self, work: Path) -> None:
        self.source = work / "kernodeck-source"
        self.source.mkdir()
        for item in ("pyproject.toml", "README.md", "kernodeck"):
            src = ROOT / item
            if src.is_dir():
                shutil.copytree(src, self.source / item, ignore=LEFT_BEHIND)
            else:
                shutil.copy2(src, self.source / item)
        self.envdir = work / "nox-envs"

    def __call__(self, project: Path, session: str, *posargs: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KERNODECK_SOURCE": str(self.source)}
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])  # uv beside this python
        extra = ["--", *posargs] if posargs else []
        return subprocess.run([sys.executable, "-m", "nox", "--envdir", str(self.envdir), "-s", session, *extra],
                              cwd=project, env=env, text=True, capture_output=True, timeout=1200, check=False)


@pytest.fixture(scope="module")
def nox_run(module_tmp: Path) -> Iterator[Nox]:
    (module_tmp / "examples").mkdir()
    yield Nox(module_tmp / "examples")


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> None:
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}):\n{tail}"


def env_python(project: Path) -> Path:
    found = sorted(project.glob(".venv-rebuild/*/current/bin/python"))
    assert len(found) == 1, found
    return found[0]


def reseal(project: Path, names: list[str]) -> None:
    """Give an edited reference a consistent manifest (a NEW identity), as `nox -s reference -- --new` would: only
    the comparison can then tell that its outputs differ."""
    path = project / "dossier" / "reference" / "manifest.toml"
    manifest = tomllib.loads(path.read_text(encoding="utf-8"))
    for name in names:
        record = manifest["outputs"][name]
        record["sha256"] = sha256_file(path.parent / record["file"])
        record["ids_sha256"] = sha256_file(path.parent / record["ids"])
    manifest["id"] = reference.identity(manifest)
    write_atomic(path, reference.render(manifest))


def test_template_from_init_to_a_passing_verify(nox_run: Nox, tmp_path: Path) -> None:
    project = tmp_path / "my-project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    init = subprocess.run([sys.executable, "-m", "kernodeck", "init"], cwd=project, text=True, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    _ok(init, "kernodeck init")
    _ok(nox_run(project, "lock"), "nox -s lock")
    _ok(nox_run(project, "reference"), "nox -s reference")
    assert (project / "dossier" / "reference" / "manifest.toml").is_file()
    proc = nox_run(project, "verify", "--out", str(tmp_path / "dossier"))
    _ok(proc, "nox -s verify")
    report = read_report(tmp_path / "dossier")
    assert report["status"] == "passed" and set(statuses(report).values()) == {"passed"}


@pytest.fixture(scope="module")
def digits(nox_run: Nox, module_tmp: Path) -> Iterator[tuple[Path, Path]]:
    """examples/digits copied outside the repository, verified once: (project, dossier)."""
    work = module_tmp / "digits"
    project = work / "digits"
    shutil.copytree(EXAMPLE, project, ignore=LEFT_BEHIND)
    out = work / "pass"
    proc = nox_run(project, "verify", "--out", str(out))
    _ok(proc, "nox -s verify (examples/digits)")
    yield project, out


def test_digits_example_verifies_from_a_copy(digits: tuple[Path, Path]) -> None:
    _, out = digits
    report = read_report(out)
    assert report["status"] == "passed" and set(statuses(report).values()) == {"passed"}
    steps = {s["name"]: s for s in report["steps"]}  # type: ignore[union-attr]
    criterion = json.dumps(steps["criterion"].get("details", {}))
    assert "test accuracy" in criterion
    # the outputs are the test split's logits and predicted labels, one row per held-out image
    sample = (EXAMPLE / "data" / "sample.jsonl").read_text(encoding="utf-8").splitlines()
    ids = json.loads((out / "outputs" / "labels.ids.json").read_text(encoding="utf-8"))
    assert ids == [json.loads(line)["id"] for line in sample]


def test_digits_perturbed_reference_fails_at_compare(nox_run: Nox, digits: tuple[Path, Path], tmp_path: Path) -> None:
    project, _ = digits
    ref = project / "dossier" / "reference" / "logits.npy"
    # one logit moved by 0.05: beyond atol + rtol*|b| (about 1e-3 + 1e-3*|b|), well inside what the reread accepts
    code = f"import numpy as np; a = np.load({str(ref)!r}); a[7, 3] += 0.05; np.save({str(ref)!r}, a)"
    subprocess.run([str(env_python(project)), "-I", "-c", code], check=True)
    reseal(project, ["logits"])
    out = tmp_path / "perturbed"
    proc = nox_run(project, "verify", "--no-rebuild", "--out", str(out))
    assert proc.returncode != 0
    report = read_report(out)
    st = statuses(report)
    assert report["first_failure"] == "compare" and st["compare"] == "failed", st
    assert st["reference"] == "passed" and st["reread"] == "passed"
    failed = next(s for s in report["steps"] if s["name"] == "compare")  # type: ignore[union-attr]
    assert "logits" in failed["error"] and failed["layer"] == "comparison"
