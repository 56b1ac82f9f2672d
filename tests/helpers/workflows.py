"""The GitHub workflows run offline: the linters beside this interpreter, a workflow's YAML and steps, the relock
job's git and bash."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.project import ROOT, kd

WORKFLOWS = ROOT / ".github" / "workflows"


SHA_PIN = re.compile(r"^\s*(?:-\s*)?uses:\s*[\w.-]+/[\w./-]+@[0-9a-f]{40}(?:\s+#\s*v[\d.]+)?\s*$")


def tool_path(name: str) -> str:
    """The tool installed beside this interpreter (the test group), else on PATH."""
    beside = Path(sys.executable).parent / (name + (".exe" if os.name == "nt" else ""))
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run the tests with `nox -s tests` (the test group pins it)")
    return found


def offline_tool_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")}
    # No route anywhere: a tool that tried the network would fail instead of silently passing.
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="")
    return env


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    argv = [tool_path("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, env=offline_tool_env(), timeout=120, check=False)


def zizmor(path: Path, persona: str = "regular") -> subprocess.CompletedProcess[str]:
    argv = [tool_path("zizmor"), "--offline", "--no-progress", f"--persona={persona}", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, env=offline_tool_env(), timeout=120, check=False)


def read_yaml(path: Path) -> dict[str, Any]:
    from ruamel.yaml import YAML

    data: dict[str, Any] = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    return data


def job_step(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in job["steps"] if s.get("name") == name)


FAKE_NOX = """#!/bin/sh
# nox -s NAME -- ARGS: the sessions are thin wrappers over python -m kernodeck NAME ARGS
[ "$1" = "-s" ] || exit 9
name="$2"; shift 2
[ "${{1:-}}" = "--" ] && shift
PYTHONPATH="$PWD" exec "{python}" -m kernodeck "$name" "$@"
"""


def run_git(cwd: Path, *args: str) -> str:
    argv = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=True, timeout=120).stdout


def run_bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A `run:` script as GitHub runs it with `shell: bash`."""
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def relocked_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """An origin repository with a committed tiny lock, and a lock job's checkout where a new release was locked."""
    import tomlkit

    from tests.helpers.tinylock import offline_sources, tiny_project, write_wheel

    wheels = tmp_path / "wheels"
    write_wheel(wheels, "kdtiny-alpha", "1.0", ("kdtiny-beta>=1",))
    write_wheel(wheels, "kdtiny-beta", "1.0")
    write_wheel(wheels, "kdtiny-torch", "1.0")
    offline_sources(monkeypatch, wheels, tmp_path / "cache")
    work = tiny_project(tmp_path / "work")
    doc = tomlkit.parse((work / "pyproject.toml").read_text(encoding="utf-8"))
    platforms = doc["tool"]["kernodeck"]["platforms"]  # type: ignore[index]
    keep = [p for p in platforms if p["variant"] == "cpu"]  # type: ignore[union-attr]
    platforms.clear()  # type: ignore[union-attr]
    platforms.extend(keep)  # type: ignore[union-attr]
    (work / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    assert kd(work, "lock").returncode == 0
    platform = "cp311-linux_x86_64-cpu"
    run_git(work, "init", "--quiet")
    run_git(work, "add", "--all")
    run_git(work, "commit", "--quiet", "-m", "tiny project")
    origin = tmp_path / "origin.git"
    run_git(tmp_path, "clone", "--quiet", "--bare", str(work), str(origin))
    # The lock job: its own checkout, after a new release of a dependency, `nox -s lock -- --platform P --upgrade`.
    write_wheel(wheels, "kdtiny-beta", "2.0")
    runner = tmp_path / "runner"
    run_git(tmp_path, "clone", "--quiet", str(origin), str(runner))
    proc = kd(runner, "lock", "--platform", platform, "--upgrade")
    assert proc.returncode == 0, proc.stderr
    changed = run_git(runner, "status", "--porcelain", "--", "lockfiles").split()
    assert f"lockfiles/{platform}.txt" in changed and f"lockfiles/pylock.{platform}.toml" in changed
    return origin, runner, platform


def platform_result(folder: Path, platform: str, *, holds: bool, culprit: list[list[str]] | None = None) -> None:
    """One platform's relock artifact as the workflow uploads it: ``upgrade/`` and, with ``culprit``, ``bisect/``,
    each with the files ``pr_body`` reads and the marker its command signs it with (:func:`outdir.mark`)."""
    from kernodeck import outdir

    upgraded = folder / platform / "upgrade"
    upgraded.mkdir(parents=True)
    data = {"version": 1, "platform": platform, "holds": holds, "failure": "",
            "verdict": "criterion still holds" if holds else "OUT OF TOLERANCE",
            "body_digest": {"old": f"sha256:old-{platform}", "new": f"sha256:new-{platform}"},
            "changes": [{"name": "numpy", "kind": "upgraded", "old": "2.3.5", "new": "2.4.0"},
                        {"name": "six", "kind": "removed", "old": "1.16.0", "new": None}]}
    (upgraded / "upgrade.json").write_text(json.dumps(data), encoding="utf-8")
    (upgraded / "upgrade.md").write_text(f"## Upgrade of {platform}\n\n| values | allclose |\n", encoding="utf-8")
    outdir.mark(upgraded, "upgrade")
    if culprit is not None:
        bisected = folder / platform / "bisect"
        bisected.mkdir()
        found = {"verdict": "found", "culprit": culprit, "platform": platform,
                 "body_digest": {"good": f"sha256:old-{platform}", "bad": f"sha256:new-{platform}"}}
        (bisected / "bisect.json").write_text(json.dumps(found), encoding="utf-8")
        (bisected / "bisect.md").write_text(f"## Bisect of {platform}\n", encoding="utf-8")
        outdir.mark(bisected, "bisect")


UPLOAD = "actions/upload-artifact@"


def unsigned_folder_uploads(workflow: dict[str, Any]) -> list[str]:
    """The upload steps of ``workflow`` that send a folder Kernodeck signed (a dossier, a drift map: one path, under
    ``runs/`` or a dossier folder; or files listed with their folder's marker) without its hidden signature:
    upload-artifact leaves dot files out unless told ``include-hidden-files: true`` (v4.4 on), and compare and drift
    then read the downloaded folder unrecorded."""
    found = []
    for job in workflow["jobs"].values():
        for step in job.get("steps", []):
            if not str(step.get("uses", "")).startswith(UPLOAD):
                continue
            path = str(step.get("with", {}).get("path", "")).strip()
            folder = "\n" not in path and ("runs/" in path or path.endswith("dossier"))
            marker = ".kernodeck-folder" in path  # files of a signed folder, with its marker named among them
            if (folder or marker) and step["with"].get("include-hidden-files") is not True:
                found.append(str(step.get("name")))
    return found
