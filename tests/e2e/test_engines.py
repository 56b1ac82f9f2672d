"""The matrix for engines past GitHub Actions: a GitLab CI parallel:matrix job and a Slurm sbatch array script.

GitLab: validated against GitLab's CI JSON schema (SchemaStore's, vendored in check-jsonschema: offline). Slurm:
``bash -n``, then the script is run as Slurm would run it, with ``sbatch``, ``srun`` and ``nox`` stubbed on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from kernodeck.ci import engines, matrix
from kernodeck.errors import ConfigError
from kernodeck.project.config import load_project
from tests.helpers.project import ROOT, copy_project, kd

CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"


def _declared_ids(root: Path) -> list[str]:
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return [f"cp{p['python'].replace('.', '')}-{p['os-arch']}-{p['variant']}"
            for p in data["tool"]["kernodeck"]["platforms"]]


def _gitlab_schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    exe = str(CHECK_JSONSCHEMA) if CHECK_JSONSCHEMA.exists() else shutil.which("check-jsonschema")
    assert exe, "check-jsonschema is pinned in the test group"
    return subprocess.run([exe, "--builtin-schema", "vendor.gitlab-ci", "--data-transform", "gitlab-ci", str(path)],
                          capture_output=True, text=True, check=False, timeout=120)


def test_gitlab_file_passes_gitlabs_ci_schema_and_lists_every_platform(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    out = project / "runs" / "gitlab-ci.yml"
    proc = kd(project, "matrix", "--format", "gitlab", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == proc.stdout
    checked = _gitlab_schema_check(out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    doc = YAML(typ="safe").load(out.read_text(encoding="utf-8"))
    job = doc["kernodeck-verify"]
    rows = job["parallel"]["matrix"]
    assert [r["PLATFORM"] for r in rows] == _declared_ids(project)
    assert all(isinstance(v, str) for r in rows for v in r.values()), "every matrix value a string (3.10 stays 3.10)"
    assert job["tags"] == ["${RUNNER}"] and "${PYTHON}" in job["image"]
    # the same commands as the GitHub workflow: lock check, then verify into one dossier folder per platform
    assert job["script"][-2:] == ['nox -s lock -- --check --platform "$PLATFORM"',
                                  'nox -s verify -- --platform "$PLATFORM" --out "runs/ci/$PLATFORM"']
    assert job["artifacts"]["paths"] == ["runs/ci/$PLATFORM"]
    assert doc["kernodeck-dossiers"]["needs"] == [{"job": "kernodeck-verify", "artifacts": True}]


def test_gitlab_schema_check_rejects_a_broken_definition(tmp_path: Path) -> None:
    """Negative control: the schema check is not a formality (a job whose parallel:matrix is a string fails)."""
    text = engines.gitlab(matrix.build(load_project(ROOT)))
    good = tmp_path / "good.yml"
    good.write_text(text, encoding="utf-8")
    assert _gitlab_schema_check(good).returncode == 0
    bad = tmp_path / "bad.yml"
    bad.write_text(text.replace("    matrix:\n", '    matrix: "rows"\n    unused:\n', 1), encoding="utf-8")
    assert _gitlab_schema_check(bad).returncode != 0


def test_hosted_only_applies_to_every_format() -> None:
    built = matrix.build(load_project(ROOT), hosted_only=True)
    text = engines.gitlab(built)
    assert "self-hosted" not in text
    assert all(f'PLATFORM: "{e["platform"]}"' in text for e in built["include"])


# --- Slurm -----------------------------------------------------------------------------------------------------------

STUB_SBATCH = r"""#!/bin/bash
# sbatch stub: run each task of the script's --array, as Slurm would, one after the other.
script="$1"
range=$(sed -n 's/^#SBATCH --array=//p' "$script")
[ -n "$range" ] || { echo "sbatch stub: no --array in $script" >&2; exit 9; }
status=0
for ((i=${range%-*}; i<=${range#*-}; i++)); do
  SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_JOB_ID=4242 SLURM_SUBMIT_DIR="$PWD" bash "$script" || status=$?
done
exit $status
"""
STUB_SRUN = '#!/bin/bash\necho "srun $*" >> "$STUB_LOG"\nexec "$@"\n'
# nox stub: records its arguments and, for a verify, writes a dossier where --out says.
STUB_NOX = r"""#!/bin/bash
echo "task $SLURM_ARRAY_TASK_ID: nox $*" >> "$STUB_LOG"
prev=""
for arg in "$@"; do
  if [ "$prev" = "--out" ]; then mkdir -p "$arg" && echo '{"status": "passed"}' > "$arg/report.json"; fi
  prev="$arg"
done
"""


def _stubs(tmp_path: Path, uname_m: str | None = None) -> dict[str, str]:
    bin_dir = tmp_path / "stubbin"
    bin_dir.mkdir()
    stubs = {"sbatch": STUB_SBATCH, "srun": STUB_SRUN, "nox": STUB_NOX}
    if uname_m:
        stubs["uname"] = f'#!/bin/bash\n[ "$1" = "-m" ] && echo {uname_m} || /usr/bin/env -i uname "$@"\n'
    for name, text in stubs.items():
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "KERNODECK_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["STUB_LOG"] = str(tmp_path / "calls.log")
    return env


def _slurm_script(tmp_path: Path) -> tuple[Path, list[str]]:
    built = matrix.build(load_project(ROOT))
    script = tmp_path / "verify.sbatch"
    script.write_text(engines.slurm(built), encoding="utf-8")
    linux = [e["platform"] for e in built["include"] if e["os_arch"].startswith("linux_")]
    return script, linux


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the dry run expects an x86_64 node for linux_x86_64")
def test_slurm_array_runs_one_verify_per_platform_into_one_folder(tmp_path: Path) -> None:
    script, linux = _slurm_script(tmp_path)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    text = script.read_text(encoding="utf-8")
    assert f"#SBATCH --array=0-{len(linux) - 1}" in text
    assert all(f"#   {i}: {plat} (" in text for i, plat in enumerate(linux)), "the header lists each task's platform"
    env = _stubs(tmp_path)
    linux_x86 = [p for p in linux if "-linux_x86_64-" in p]
    proc = subprocess.run(["sbatch", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False, timeout=60)
    calls = (tmp_path / "calls.log").read_text(encoding="utf-8").splitlines()
    for task, plat in enumerate(linux):
        if plat not in linux_x86:
            continue
        assert f"task {task}: nox -s lock -- --check --platform {plat}" in calls
        assert f"task {task}: nox -s verify -- --platform {plat} --out runs/ci/slurm-4242/{plat}" in calls
        assert (tmp_path / "runs" / "ci" / "slurm-4242" / plat / "report.json").is_file()
    assert sum(line.startswith("srun ") for line in calls) == 2 * len(linux_x86), "each step under srun"
    assert sorted(p.name for p in (tmp_path / "runs/ci/slurm-4242").iterdir()) == sorted(linux_x86)
    assert (proc.returncode == 0) == (linux == linux_x86), proc.stderr


def test_slurm_python_mode_and_wrong_node_refused(tmp_path: Path) -> None:
    """KERNODECK_PYTHON verifies that interpreter (verify --python); a task on another machine type than its
    platform's stops (exit 3) and runs nothing."""
    script, linux = _slurm_script(tmp_path)
    env = _stubs(tmp_path, uname_m="riscv64")
    env.update(SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_JOB_ID="7", SLURM_SUBMIT_DIR=str(tmp_path))
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 3 and "needs a" in proc.stderr and "riscv64" in proc.stderr
    assert not (tmp_path / "calls.log").exists()

    machine = "x86_64" if "-linux_x86_64-" in linux[0] else "aarch64"
    (tmp_path / "ok").mkdir()
    env = _stubs(tmp_path / "ok", uname_m=machine)
    env.update(SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_JOB_ID="7", SLURM_SUBMIT_DIR=str(tmp_path),
               KERNODECK_PYTHON="/opt/py/bin/python3")
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "ok" / "calls.log").read_text(encoding="utf-8")
    assert (f"nox -s verify -- --platform {linux[0]} --python /opt/py/bin/python3 "
            f"--out runs/ci/slurm-7/{linux[0]}") in calls

    env.update(SLURM_ARRAY_TASK_ID=str(len(linux)))  # past the array: no platform
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "no platform" in proc.stderr


def test_slurm_leaves_out_non_linux_and_refuses_an_empty_array() -> None:
    built = matrix.build(load_project(ROOT))
    kept = engines.slurm_entries(built)
    assert [e["platform"] for e in kept] == [e["platform"] for e in built["include"]
                                             if e["os_arch"] in engines.SLURM_MACHINES]
    mac_only = matrix.Matrix(include=[e for e in built["include"] if e["os_arch"].startswith("macosx")])
    assert mac_only["include"], "the project declares a macOS platform"
    with pytest.raises(ConfigError, match="Slurm array would be empty"):
        engines.slurm(mac_only)


def test_slurm_gpu_request_only_when_a_gpu_platform_is_in_the_array() -> None:
    built = matrix.build(load_project(ROOT))
    cpu = matrix.Matrix(include=[e for e in built["include"] if e["backend"] == "cpu"])
    gpu = matrix.Matrix(include=[e for e in built["include"] if e["backend"] in engines.GPU_BACKENDS])
    assert "--gres=gpu" not in engines.slurm(cpu)
    assert re.search(r"^#SBATCH --gres=gpu:1$", engines.slurm(gpu), re.MULTILINE)


@pytest.mark.parametrize("fmt", list(engines.Format))
def test_every_format_renders(fmt: engines.Format) -> None:
    text = engines.render(fmt, matrix.build(load_project(ROOT)))
    assert text.endswith("\n") and "cp311-linux_x86_64-cpu" in text
