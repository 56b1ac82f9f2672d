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

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
NAMES = ("verify.yml", "lock.yml")
_SHA_PIN = re.compile(r"^\s*(?:-\s*)?uses:\s*[\w.-]+/[\w./-]+@[0-9a-f]{40}(?:\s+#\s*v[\d.]+)?\s*$")


def _tool(name: str) -> str:
    """The tool installed beside this interpreter (the test group), else on PATH."""
    beside = Path(sys.executable).parent / (name + (".exe" if os.name == "nt" else ""))
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run the tests with `nox -s tests` (the test group pins it)")
    return found


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")}
    # No route anywhere: a tool that tried the network would fail instead of silently passing.
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="")
    return env


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    argv = [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, env=_offline_env(), timeout=120, check=False)


def zizmor(path: Path) -> subprocess.CompletedProcess[str]:
    argv = [_tool("zizmor"), "--offline", "--no-progress", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, env=_offline_env(), timeout=120, check=False)


@pytest.mark.parametrize("name", NAMES)
def test_workflow_is_schema_valid(name: str) -> None:
    proc = schema_check(WORKFLOWS / name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_workflow_is_zizmor_clean(name: str) -> None:
    proc = zizmor(WORKFLOWS / name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_workflow_least_privilege_and_pins(name: str) -> None:
    text = (WORKFLOWS / name).read_text(encoding="utf-8")
    assert re.search(r"^permissions: \{\}$", text, re.M), "no permission at the top: each job asks for its own"
    uses = [line for line in text.splitlines() if re.match(r"^\s*(-\s*)?uses:", line)]
    assert uses and all(_SHA_PIN.match(line) for line in uses), "every action pinned by commit SHA"
    assert text.count("persist-credentials: false") == text.count("actions/checkout@")
    assert "pull_request_target" not in text
    for line in text.splitlines():  # expressions reach scripts only through env
        if "${{" in line:
            assert not line.lstrip().startswith(("run:", "echo", "nox", "git", "gh ")), line


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
