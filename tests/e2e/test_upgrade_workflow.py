"""The relock workflow: schema and zizmor clean, its PR body from a tested function, its jobs' logic run locally."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from kernodeck import outdir
from kernodeck.errors import ConfigError, UnsafeOut
from kernodeck.upgrade.pullrequest import PR_BODY_LIMIT, pr_body, write_pr_body
from tests.helpers.workflows import (
    FAKE_NOX,
    SHA_PIN,
    WORKFLOWS,
    job_step,
    platform_result,
    read_yaml,
    relocked_origin,
    run_bash,
    run_git,
    schema_check,
    zizmor,
)

RELOCK = WORKFLOWS / "relock.yml"


def test_relock_workflow_is_schema_valid_and_zizmor_clean() -> None:
    proc = schema_check(RELOCK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for persona in ("regular", "auditor"):
        proc = zizmor(RELOCK, persona)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_relock_workflow_least_privilege_schedule_and_steps() -> None:
    text = RELOCK.read_text(encoding="utf-8")
    assert re.search(r"^permissions: \{\}$", text, re.M)
    uses = [line for line in text.splitlines() if re.match(r"^\s*(-\s*)?uses:", line)]
    assert uses and all(SHA_PIN.match(line) for line in uses)
    assert text.count("persist-credentials: false") == text.count("actions/checkout@")
    assert text.count("contents: write") == 1 and text.count("pull-requests: write") == 1
    for line in text.splitlines():  # expressions reach scripts only through env
        if "${{" in line:
            assert not line.lstrip().startswith(("run:", "echo", "nox", "git", "gh ")), line
    data = read_yaml(RELOCK)
    triggers = data.get("on") or data.get(True)  # YAML 1.1 reads a bare `on` as true
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    assert "--locked-only" in text and "runs-on: ${{ matrix.runs_on }}" in text


def _upgrade_step_env(tmp_path: Path, exit_code: int) -> tuple[dict[str, str], Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nox").write_text(
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n"  # writes where it is told
        "mkdir -p \"$out\"\necho '## Upgrade of '$PLATFORM > \"$out/upgrade.md\"\n"
        f"exit {exit_code}\n", encoding="utf-8")
    (bin_dir / "nox").chmod(0o755)
    out, summary = tmp_path / "output", tmp_path / "summary"
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]]), "PLATFORM": "cp311-x",
           "AS_OF": "2026-11-01", "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)}
    return env, out, summary


@pytest.mark.parametrize(("code", "job_ok", "bisects"), [(0, True, False), (1, True, True), (3, True, False),
                                                       (2, False, False)])
def test_upgrade_job_reports_out_of_tolerance_and_fails_on_errors(tmp_path: Path, code: int, job_ok: bool,
                                                                  bisects: bool) -> None:
    job = read_yaml(RELOCK)["jobs"]["upgrade"]
    step = job_step(job, "relock, diff, verify against the reference")
    env, out, summary = _upgrade_step_env(tmp_path, code)
    work = tmp_path / "work"
    work.mkdir()
    proc = run_bash(step["run"], work, env)
    assert (proc.returncode == 0) is job_ok, proc.stdout + proc.stderr
    assert f"status={code}" in out.read_text(encoding="utf-8")
    assert "## Upgrade of cp311-x" in summary.read_text(encoding="utf-8")  # the drift table in the job summary
    condition = job_step(job, "bisect what moved the outputs")["if"]
    assert condition == "${{ steps.upgrade.outputs.status == '1' }}" and bisects is (code == 1)


def test_pr_body_names_each_platform_its_changes_verdict_and_bisect(tmp_path: Path) -> None:
    platform_result(tmp_path, "cp311-linux_x86_64-cpu", holds=True)
    platform_result(tmp_path, "cp311-macosx_arm64-mps", holds=False, culprit=[["numpy"]])
    body = pr_body(["cp311-linux_x86_64-cpu", "cp311-macosx_arm64-mps", "cp311-linux_x86_64-cu130"], tmp_path,
                   as_of="2026-11-01", run_url="https://github.com/o/r/actions/runs/1")
    assert body.startswith("## Relock as of 2026-11-01\n")
    assert "| cp311-linux_x86_64-cpu | 1 removed, 1 upgraded | within tolerance, criterion holds |" in body
    assert "| cp311-macosx_arm64-mps | 1 removed, 1 upgraded | **OUT OF TOLERANCE**; bisect: numpy |" in body
    assert "| cp311-linux_x86_64-cu130 | — | **no result**" in body  # its job failed: said, not hidden
    assert "<details><summary>cp311-macosx_arm64-mps</summary>" in body and "## Bisect of cp311-macosx" in body



@pytest.mark.parametrize("edit", ["changed", "added", "unsigned"])
def test_pr_body_shows_only_what_upgrade_and_bisect_wrote(tmp_path: Path, edit: str) -> None:
    """A result file edited after its command wrote it (or never listed by its folder's marker, or in a folder with
    no marker) is named NOT AS WRITTEN and its content is not shown; the untouched platform beside it is."""
    platform_result(tmp_path, "cp311-linux_x86_64-cpu", holds=True)
    platform_result(tmp_path, "cp311-macosx_arm64-mps", holds=False, culprit=[["numpy"]])
    upgraded, bisected = tmp_path / "cp311-linux_x86_64-cpu" / "upgrade", tmp_path / "cp311-macosx_arm64-mps" / "bisect"
    if edit == "changed":  # the failing platform's verdict turned into a pass, the culprit renamed
        (upgraded / "upgrade.json").write_text(json.dumps({"holds": False, "changes": []}), encoding="utf-8")
        (bisected / "bisect.json").write_text(json.dumps({"culprit": [["six"]]}), encoding="utf-8")
        (bisected / "bisect.md").write_text("## Bisect: all fine\n", encoding="utf-8")
    elif edit == "added":  # the files moved aside, copies of other content in their place (not listed: unsigned)
        for signed in (upgraded, bisected):
            (signed / outdir.MARKER).unlink()
            outdir.mark(signed, signed.name, {})
    else:
        (upgraded / outdir.MARKER).unlink()
        (bisected / outdir.MARKER).unlink()
    body = pr_body(["cp311-linux_x86_64-cpu", "cp311-macosx_arm64-mps"], tmp_path)
    why = {"changed": "changed since Kernodeck wrote it", "added": "Kernodeck did not write it",
           "unsigned": f"its folder has no {outdir.MARKER}"}[edit]
    assert "| cp311-linux_x86_64-cpu | — | **NOT AS WRITTEN FOR THIS PLATFORM**: upgrade/upgrade.json: " + why in body
    assert "within tolerance" not in body and "six" not in body and "all fine" not in body
    assert f"**OUT OF TOLERANCE**; bisect: **NOT AS WRITTEN** (bisect/bisect.json: {why}" in body
    # control: the same folders as written show every result
    clean = tmp_path / "clean"
    platform_result(clean, "cp311-linux_x86_64-cpu", holds=True)
    platform_result(clean, "cp311-macosx_arm64-mps", holds=False, culprit=[["numpy"]])
    body = pr_body(["cp311-linux_x86_64-cpu", "cp311-macosx_arm64-mps"], clean)
    assert "NOT AS WRITTEN" not in body and "within tolerance" in body and "bisect: numpy" in body



@pytest.mark.parametrize("case", ["linked-folder", "stale-bisect", "no-digests"])
def test_pr_body_shows_a_result_only_under_the_upgrade_it_belongs_to(tmp_path: Path, case: str) -> None:
    """As written is not enough: an upgrade folder that is a link to another platform's, or a bisect of another
    upgrade's locks beside this one's (its digests differ), is named and not shown; the honest folders are."""
    one, other = "cp311-linux_x86_64-cpu", "cp311-macosx_arm64-mps"
    platform_result(tmp_path, other, holds=False, culprit=[["numpy"]])
    if case == "linked-folder":
        (tmp_path / one).mkdir()
        (tmp_path / one / "upgrade").symlink_to(tmp_path / other / "upgrade")
        row = pr_body([one], tmp_path).splitlines()[4]
        assert "NOT AS WRITTEN FOR THIS PLATFORM" in row and "is a link" in row and "OUT OF TOLERANCE" not in row
    elif case == "no-digests":  # neither file records the locks: nothing shows they belong together
        platform_result(tmp_path, one, holds=False, culprit=[["six"]])
        for signed, name in (("upgrade", "upgrade.json"), ("bisect", "bisect.json")):
            found = tmp_path / one / signed / name
            data = json.loads(found.read_text(encoding="utf-8"))
            del data["body_digest"]
            found.write_text(json.dumps(data), encoding="utf-8")
            outdir.mark(found.parent, signed)
        assert "bisect: **NOT THIS UPGRADE'S** (bisect/bisect.json: its good, bad differ)" in pr_body([one], tmp_path)
    else:
        platform_result(tmp_path / "stale", one, holds=False, culprit=[["six"]])
        platform_result(tmp_path, one, holds=False)  # this run's upgrade: no bisect yet
        shutil.copytree(tmp_path / "stale" / one / "bisect", tmp_path / one / "bisect")
        found = tmp_path / one / "bisect" / "bisect.json"
        data = json.loads(found.read_text(encoding="utf-8"))
        data["body_digest"]["bad"] = "sha256:an-earlier-new-lock"  # the bisect of an earlier relock's new lock
        found.write_text(json.dumps(data), encoding="utf-8")
        outdir.mark(found.parent, "bisect")  # as bisect wrote it, then
        body = pr_body([one], tmp_path)
        assert "**OUT OF TOLERANCE**; bisect: **NOT THIS UPGRADE'S** (bisect/bisect.json: its bad differ)" in body
        assert "six" not in body and "another upgrade's bisect, not shown" in body
    # control: the other platform's own folders under its own name
    assert "**OUT OF TOLERANCE**; bisect: numpy" in pr_body([other], tmp_path)


@pytest.mark.parametrize("given", ["../elsewhere/cp311-linux_x86_64-cpu", "a|b", "/abs", ".."])
def test_pr_body_refuses_a_platform_that_is_not_a_plain_name(tmp_path: Path, given: str) -> None:
    with pytest.raises(ConfigError, match="a platform id is a plain name") as refused:
        write_pr_body(tmp_path, f"cp311-linux_x86_64-cpu {given}")
    assert refused.value.tip.startswith("nox -s upgrade -- --pr-body") and not (tmp_path / "pr-body.md").exists()
    assert "| cp311-x |" in write_pr_body(tmp_path, "cp311-x")  # control: a plain name is read

def test_the_bisect_job_writes_beside_the_upgrade_it_reads(tmp_path: Path) -> None:
    """The bisect step's --out is a place Kernodeck accepts once the upgrade step signed its folder (a folder signed
    whole takes no new entry: inside it, bisect is refused and the job fails), and its --good is the old lock the
    upgrade kept; what the upload sends is what those two commands write."""
    job = read_yaml(RELOCK)["jobs"]["upgrade"]
    runs = {name: job_step(job, name)["run"].replace("$PLATFORM", "P")
            for name in ("relock, diff, verify against the reference", "bisect what moved the outputs")}
    upgrade_out = Path(re.findall(r'--out "([^"]+)"', runs["relock, diff, verify against the reference"])[0])
    bisect_out = Path(re.findall(r'--out "([^"]+)"', runs["bisect what moved the outputs"])[0])
    good = re.findall(r'--good "([^"]+)"', runs["bisect what moved the outputs"])[0]
    assert good == f"{upgrade_out}/old/P.txt"
    (tmp_path / upgrade_out / "old").mkdir(parents=True)
    outdir.mark(tmp_path / upgrade_out, "upgrade")
    assert outdir.check(tmp_path / bisect_out, what="bisect", tip="t") == (tmp_path / bisect_out).resolve()
    with pytest.raises(UnsafeOut, match="inside"):  # negative: the layout before, bisect inside the upgrade's
        outdir.check(tmp_path / upgrade_out / "bisect", what="bisect", tip="t")
    upload = next(s for s in job["steps"] if "upload-artifact" in str(s.get("uses")))["with"]["path"]
    sent = {line.strip().replace("${{ matrix.platform }}", "P") for line in upload.splitlines()}
    for folder, names in ((upgrade_out, ("upgrade.json", "upgrade.md")), (bisect_out, ("bisect.json", "bisect.md"))):
        assert {f"{folder}/{n}" for n in (outdir.MARKER, *names)} <= sent

def test_pr_body_over_githubs_limit_keeps_the_table_only(tmp_path: Path) -> None:
    platform_result(tmp_path, "cp311-linux_x86_64-cpu", holds=True)
    upgraded = tmp_path / "cp311-linux_x86_64-cpu" / "upgrade"
    (upgraded / "upgrade.md").write_text("x" * (PR_BODY_LIMIT + 10), encoding="utf-8")
    outdir.mark(upgraded, "upgrade")  # as upgrade wrote it
    body = pr_body(["cp311-linux_x86_64-cpu"], tmp_path)
    assert len(body) < PR_BODY_LIMIT and "too long for this page" in body
    assert "| cp311-linux_x86_64-cpu |" in body


@pytest.mark.slow
@pytest.mark.reliability(94, "the relock workflow's propose job in a scratch clone: one platform's new lock and "
                         "upgrade report as artifacts, a second platform whose job failed",
                         "the locks check, the PR is opened with --body-file, the body names both platforms")
def test_propose_job_opens_one_pr_whose_body_is_the_generated_one(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    origin, runner, platform = relocked_origin(tmp_path, monkeypatch)
    job = read_yaml(RELOCK)["jobs"]["propose"]
    temp = tmp_path / "runner-temp"
    found = temp / "relock"
    for rel in (f"lockfiles/{platform}.txt", f"lockfiles/pylock.{platform}.toml"):
        (found / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(runner / rel, found / rel)
    platform_result(found / "runs" / "relock", platform, holds=True)
    clone = tmp_path / "propose"
    run_git(tmp_path, "clone", "--quiet", str(origin), str(clone))
    bin_dir, gh_log = tmp_path / "bin", tmp_path / "gh.log"
    bin_dir.mkdir()
    gh = f"#!/bin/sh\necho \"$*\" >> \"{gh_log}\"\n"
    for name, text in (("nox", FAKE_NOX.format(python=sys.executable)), ("gh", gh)):
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]]), "RUNNER_TEMP": str(temp),
           "PLATFORMS": f"{platform} cp311-linux_x86_64-cu130", "AS_OF": "2026-11-01",
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), "GH_TOKEN": "dummy", "OWN_TOKEN": "true",
           "RUN_ID": "42", "BASE": "main"}
    for name in ("take the new locks", "every lock reads back and matches its inputs", "the pull request's body",
                 "open a pull request"):
        proc = run_bash(job_step(job, name)["run"], clone, env)
        assert proc.returncode == 0, f"{name}: {proc.stdout}{proc.stderr}"
    calls = gh_log.read_text(encoding="utf-8").splitlines()
    assert calls[0] == "auth setup-git"
    assert calls[1].startswith("pr create --base main --head kernodeck/relock-42 --title relock: as of 2026-11-01")
    body = (found / "runs" / "relock" / "pr-body.md").read_text(encoding="utf-8")
    assert f"--body-file {found / 'runs' / 'relock' / 'pr-body.md'}" in calls[1]
    assert f"| {platform} | 1 removed, 1 upgraded | within tolerance" in body
    assert "| cp311-linux_x86_64-cu130 | — | **no result**" in body
    assert "## Relock as of 2026-11-01" in (tmp_path / "summary").read_text(encoding="utf-8")
    files = run_git(origin, "diff", "--name-only", "main", "kernodeck/relock-42").split()
    assert sorted(files) == sorted([f"lockfiles/{platform}.txt", f"lockfiles/pylock.{platform}.toml"])


def test_pr_body_shows_a_bisect_report_only_beside_its_own_upgrade_whatever_the_verdict(tmp_path: Path) -> None:
    """A stale bisect folder beside an upgrade that holds (so its row reads no bisect) is not shown in the details
    either; nor is a bisect.md beside a bisect.json changed since bisect wrote it. Control: its own bisect is."""
    one = "cp311-linux_x86_64-cpu"
    platform_result(tmp_path / "stale", one, holds=False, culprit=[["six"]])
    platform_result(tmp_path, one, holds=True)
    shutil.copytree(tmp_path / "stale" / one / "bisect", tmp_path / one / "bisect")
    found = tmp_path / one / "bisect" / "bisect.json"
    data = json.loads(found.read_text(encoding="utf-8"))
    data["body_digest"]["bad"] = "sha256:an-earlier-new-lock"
    found.write_text(json.dumps(data), encoding="utf-8")
    outdir.mark(found.parent, "bisect")
    body = pr_body([one], tmp_path)
    assert "## Bisect of" not in body and "bisect/bisect.md: another upgrade's bisect, not shown" in body
    found.write_text(json.dumps({**data, "culprit": [["numpy"]]}), encoding="utf-8")  # changed after it was signed
    assert "its bisect.json is not as bisect wrote it, not shown" in pr_body([one], tmp_path)
    own = tmp_path / "own"
    platform_result(own, one, holds=False, culprit=[["numpy"]])
    assert "## Bisect of" in pr_body([one], own)
