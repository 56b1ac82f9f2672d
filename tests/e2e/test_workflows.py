"""The GitHub workflows: valid against GitHub's workflow schema and clean under zizmor, both offline.

check-jsonschema's ``vendor.github-workflows`` schema ships inside the package; ``zizmor --offline`` audits without
the network. Both come from the `test` dependency group. Each check also has a broken workflow showing it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.project import ROOT, kd
from tests.helpers.workflows import (
    FAKE_NOX,
    SHA_PIN,
    WORKFLOWS,
    job_step,
    offline_tool_env,
    read_yaml,
    relocked_origin,
    run_bash,
    run_git,
    schema_check,
    tool_path,
    unsigned_folder_uploads,
    zizmor,
)

NAMES = ("verify.yml", "lock.yml")


@pytest.mark.parametrize("name", NAMES)
def test_workflow_is_schema_valid(name: str) -> None:
    proc = schema_check(WORKFLOWS / name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_workflow_is_zizmor_clean(name: str) -> None:
    for persona in ("regular", "auditor"):  # the auditor persona also reports what the regular one suppresses
        proc = zizmor(WORKFLOWS / name, persona)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "suppressed" not in proc.stdout + proc.stderr or persona == "regular"


@pytest.mark.parametrize("name", NAMES)
def test_workflow_least_privilege_and_pins(name: str) -> None:
    text = (WORKFLOWS / name).read_text(encoding="utf-8")
    assert re.search(r"^permissions: \{\}$", text, re.M), "no permission at the top: each job asks for its own"
    uses = [line for line in text.splitlines() if re.match(r"^\s*(-\s*)?uses:", line)]
    assert uses and all(SHA_PIN.match(line) for line in uses), "every action pinned by commit SHA"
    assert text.count("persist-credentials: false") == text.count("actions/checkout@")
    assert "pull_request_target" not in text
    for line in text.splitlines():  # expressions reach scripts only through env
        if "${{" in line:
            assert not line.lstrip().startswith(("run:", "echo", "nox", "git", "gh ")), line


def test_dependabot_keeps_the_pinned_actions_and_the_nox_bootstrap_current() -> None:
    path = ROOT / ".github" / "dependabot.yml"
    argv = [tool_path("check-jsonschema"), "--builtin-schema", "vendor.dependabot", str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=offline_tool_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    updates = {(u["package-ecosystem"], u["directory"]) for u in read_yaml(path)["updates"]}
    assert ("github-actions", "/") in updates and ("pip", "/.github/requirements") in updates


def test_nox_bootstrap_is_hash_pinned() -> None:
    """Every workflow installs nox from a requirements file where every pin carries hashes (pip --require-hashes)."""
    from kernodeck.lock import lockfile

    bootstrap = ROOT / ".github" / "requirements" / "nox.txt"
    lock = lockfile.parse_checked(bootstrap.read_text(encoding="utf-8"), bootstrap, require_header=False)
    assert {p.name for p in lock.pins} >= {"nox", "virtualenv", "packaging"}
    assert all(p.version and p.hashes for p in lock.pins)
    for name in NAMES:
        runs = [step.get("run", "") for job in read_yaml(WORKFLOWS / name)["jobs"].values() for step in job["steps"]]
        installs = [r for r in runs if "pip install" in r]
        assert installs and all(
            r.strip() == "python -m pip install --require-hashes --no-deps -r .github/requirements/nox.txt"
            for r in installs
        ), installs


def test_a_signed_folder_is_uploaded_with_its_signature() -> None:
    """A dossier or drift map uploaded as an artifact keeps its .kernodeck-folder (upload-artifact drops dot files by
    default), so drift and compare on the downloaded folders hold them to what Kernodeck wrote."""
    from ruamel.yaml import YAML

    template = ROOT / "kernodeck" / "project" / "templates" / ".github" / "workflows" / "kernodeck.yml.tmpl"
    workflows = [read_yaml(WORKFLOWS / "verify.yml"), read_yaml(WORKFLOWS / "relock.yml"),
                 YAML(typ="safe").load(template.read_text(encoding="utf-8"))]
    assert all(unsigned_folder_uploads(w) == [] for w in workflows)
    # negative: the relock's files listed with their folders' markers, the key taken out
    relock = read_yaml(WORKFLOWS / "relock.yml")
    step = next(s for s in relock["jobs"]["upgrade"]["steps"] if "upload-artifact" in str(s.get("uses")))
    del step["with"]["include-hidden-files"]
    assert unsigned_folder_uploads(relock) == [step["name"]]
    # negative: the key taken out of the dossier's upload, the step is named
    verify = read_yaml(WORKFLOWS / "verify.yml")
    step = next(s for job in verify["jobs"].values() for s in job["steps"] if s.get("name") == "keep the dossier")
    del step["with"]["include-hidden-files"]
    assert unsigned_folder_uploads(verify) == ["keep the dossier"]


def test_verify_workflow_runs_the_sessions_per_platform() -> None:
    text = (WORKFLOWS / "verify.yml").read_text(encoding="utf-8")
    assert "nox -s matrix" in text and "fromJSON(needs.matrix.outputs.matrix)" in text
    assert "runs-on: ${{ matrix.runs_on }}" in text
    for command in (
        'nox -s lock -- --check --platform "$PLATFORM"',
        'nox -s rebuild -- --platform "$PLATFORM"',
        'nox -s verify -- --platform "$PLATFORM" --out "runs/ci/$PLATFORM"',
    ):
        assert command in text
    assert "actions/upload-artifact@" in text and "path: runs/ci/${{ matrix.platform }}" in text
    assert "--hosted-only" in text, "fork pull requests never reach self-hosted runners"
    # Only platforms with a committed lock, and self-hosted rows only for runners the repository declares.
    assert "--locked-only" in text and '--self-hosted-runners "$SELF_HOSTED"' in text
    assert "vars.KERNODECK_SELF_HOSTED_RUNNERS" in text


def test_lock_workflow_locks_on_each_platform_and_proposes() -> None:
    text = (WORKFLOWS / "lock.yml").read_text(encoding="utf-8")
    assert re.search(r"^on:\n  workflow_dispatch:", text, re.M) and "push:" not in text
    assert "runs-on: ${{ matrix.runs_on }}" in text and 'nox -s lock -- "${args[@]}"' in text
    assert "nox -s lock -- --check --all" in text and "gh pr create" in text
    # Write access only where the proposal is made.
    assert text.count("contents: write") == 1 and text.count("pull-requests: write") == 1


BROKEN_SCHEMA = """name: broken
on: push
jobs:
  build:
    steps:
      - run: echo "no runs-on"
"""

# Everything zizmor exists to catch: a floating action, credentials kept on disk, an attacker-controlled title
# expanded into a shell script, and default (broad) permissions.
BROKEN_AUDIT = """name: unsafe
on:
  issues:
    types: [opened]
jobs:
  greet:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.issue.title }}"
"""


def test_schema_check_fails_on_a_broken_workflow(tmp_path: Path) -> None:
    path = tmp_path / "broken.yml"
    path.write_text(BROKEN_SCHEMA, encoding="utf-8")
    proc = schema_check(path)
    assert proc.returncode != 0 and "runs-on" in proc.stdout + proc.stderr


def test_zizmor_fails_on_an_unsafe_workflow(tmp_path: Path) -> None:
    path = tmp_path / "unsafe.yml"
    path.write_text(BROKEN_AUDIT, encoding="utf-8")
    assert schema_check(path).returncode == 0, "schema-valid: only the audit can catch it"
    proc = zizmor(path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for audit in ("template-injection", "artipacked", "unpinned-uses"):
        assert audit in out, out


# --- the relock workflow's propose job, run locally ------------------------------------------------------------------


FAKE_GH = """#!/bin/sh
echo "$*" >> "{log}"
"""


def _propose(tmp_path: Path, origin: Path, runner: Path, platform: str, uploaded: list[str]) -> tuple[
        subprocess.CompletedProcess[str], subprocess.CompletedProcess[str] | None, Path, Path]:
    """The propose job's steps in a scratch clone: download the artifacts, check every lock, open the PR."""
    job = read_yaml(WORKFLOWS / "lock.yml")["jobs"]["propose"]
    download = job_step(job, "collect the new locks")["with"]
    clone = tmp_path / "propose"
    run_git(tmp_path, "clone", "--quiet", str(origin), str(clone))
    for path in uploaded:  # what upload-artifact kept, below the paths' common folder, restored into `path`
        source = runner / path
        shutil.copy2(source, clone / download["path"] / source.name)
    bin_dir, gh_log = tmp_path / "bin", tmp_path / "gh.log"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("nox", FAKE_NOX.format(python=sys.executable)), ("gh", FAKE_GH.format(log=gh_log))):
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]])}
    check = run_bash(job_step(job, "every lock reads back and matches its inputs")["run"], clone, env)
    if check.returncode != 0:
        return check, None, clone, gh_log
    pr_env = {**env, "GH_TOKEN": "dummy", "OWN_TOKEN": "true", "RUN_ID": "42", "BASE": "main"}
    pr = run_bash(job_step(job, "open a pull request")["run"], clone, pr_env)
    return check, pr, clone, gh_log


def _uploaded(platform: str) -> list[str]:
    upload = job_step(read_yaml(WORKFLOWS / "lock.yml")["jobs"]["lock"], "keep the lock and its PEP 751 twin")["with"]
    return [line.strip().replace("${{ matrix.platform }}", platform) for line in upload["path"].splitlines() if line]


def test_propose_job_commits_both_lock_files_and_opens_a_pr_that_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin, runner, platform = relocked_origin(tmp_path, monkeypatch)
    uploaded = _uploaded(platform)
    assert uploaded == [f"lockfiles/{platform}.txt", f"lockfiles/pylock.{platform}.toml"]
    check, pr, _, gh_log = _propose(tmp_path, origin, runner, platform, uploaded)
    assert check.returncode == 0, check.stdout + check.stderr
    assert pr is not None and pr.returncode == 0, pr.stdout + pr.stderr
    assert "::warning::no KERNODECK_LOCK_PR_TOKEN secret" in pr.stdout  # the fallback token's limit, said
    calls = gh_log.read_text(encoding="utf-8").splitlines()
    assert calls[0] == "auth setup-git" and calls[1].startswith("pr create --base main --head kernodeck/lock-42")
    # What was pushed: both files, and a fresh clone of the branch passes `lock --check --all`.
    files = run_git(origin, "diff", "--name-only", "main", "kernodeck/lock-42").split()
    assert sorted(files) == sorted(uploaded)
    fresh = tmp_path / "fresh"
    run_git(tmp_path, "clone", "--quiet", "--branch", "kernodeck/lock-42", str(origin), str(fresh))
    proc = kd(fresh, "lock", "--check", "--all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kdtiny-beta==2.0" in (fresh / "lockfiles" / f"{platform}.txt").read_text(encoding="utf-8")


def test_propose_job_with_only_the_txt_uploaded_fails_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control, the bug as it was: the twin not uploaded, so the check refuses the proposal."""
    origin, runner, platform = relocked_origin(tmp_path, monkeypatch)
    check, pr, _, gh_log = _propose(tmp_path, origin, runner, platform, [f"lockfiles/{platform}.txt"])
    assert check.returncode != 0 and pr is None and not gh_log.exists()
    assert f"pylock.{platform}.toml was not written for this {platform}.txt" in check.stdout + check.stderr
