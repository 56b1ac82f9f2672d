"""The CI matrix for engines past GitHub Actions: a GitLab CI ``parallel:matrix`` job and a Slurm ``sbatch`` array.

    python -m kernodeck matrix --format gitlab --out .gitlab-ci.yml
    python -m kernodeck matrix --format slurm --out verify.sbatch      # then: sbatch verify.sbatch

Both are rendered from the same :class:`kernodeck.ci.matrix.Matrix` as the GitHub Actions one (same platforms, same
selection options: ``--hosted-only``, ``--locked-only``, ``--self-hosted-runners``), and both run the same commands as
the GitHub workflow: ``nox -s lock -- --check`` then ``nox -s verify`` with the dossier written to
``runs/ci/<platform>``. Every dossier ends in one folder, which ``nox -s compare`` (and the drift map) reads.

The GitLab text is YAML whose every scalar is a JSON string (a JSON string is a YAML double-quoted string): no YAML
library is needed and no value can change type (``3.10`` stays a string).
"""

from __future__ import annotations

import enum
import json
import shlex
from pathlib import Path
from typing import assert_never

from kernodeck import tips
from kernodeck._proc import log
from kernodeck.ci.matrix import Matrix, MatrixEntry
from kernodeck.ci.matrix import render as render_github
from kernodeck.ci.matrix import write as write_github
from kernodeck.errors import ConfigError
from kernodeck.project.config import Project

# Where each verify writes its dossier (the GitHub workflow uses the same folder): one folder for all platforms.
DOSSIERS = "runs/ci"
# The hash-pinned nox the GitHub workflow installs; GitLab and Slurm install the same file.
NOX_REQUIREMENTS = ".github/requirements/nox.txt"
# Accelerator backends that need a GPU on the Slurm node (matrix entries carry the variant's backend).
GPU_BACKENDS = frozenset({"cuda", "rocm"})
# `uname -m` of each Linux OS/arch a Slurm node can be (a Slurm cluster is Linux).
SLURM_MACHINES = {"linux_x86_64": "x86_64", "linux_aarch64": "aarch64"}


class Format(enum.StrEnum):
    GITHUB = "github"
    GITLAB = "gitlab"
    SLURM = "slurm"


def render(fmt: Format, matrix: Matrix) -> str:
    """The matrix as the engine ``fmt`` takes it (the text of the file, newline-terminated)."""
    if fmt is Format.GITHUB:
        return render_github(matrix) + "\n"
    if fmt is Format.GITLAB:
        return gitlab(matrix)
    if fmt is Format.SLURM:
        return slurm(matrix)
    assert_never(fmt)


def verify_commands(platform: str, *, python: str | None = None) -> list[list[str]]:
    """The commands one platform's job runs, as argument lists: the lock check, then verify (which rebuilds the env
    from the lock, or, with ``python``, verifies that existing interpreter instead)."""
    verify = ["nox", "-s", "verify", "--", "--platform", platform]
    if python is not None:
        verify += ["--python", python]
    return [
        ["nox", "-s", "lock", "--", "--check", "--platform", platform],
        [*verify, "--out", f"{DOSSIERS}/{platform}"],
    ]


def _q(value: str) -> str:
    return json.dumps(value)


def gitlab(matrix: Matrix) -> str:
    """A ``.gitlab-ci.yml`` with one ``parallel:matrix`` job (one row per platform) and a job collecting the dossiers.

    A row's runner label becomes the job's ``tags`` (register the GitLab runners with the same labels as the
    ``runner`` of ``[[tool.kernodeck.platforms]]``); the image is the platform's Python (used by Docker executors,
    ignored by shell executors such as a macOS or GPU machine's).
    """
    rows: list[str] = []
    for entry in matrix["include"]:
        rows += [
            f"      - PLATFORM: {_q(entry['platform'])}",
            f"        PYTHON: {_q(entry['python'])}",
            f"        RUNNER: {_q(entry['runner'])}",
            f"        BACKEND: {_q(entry['backend'])}",
        ]
    script = [
        f"python -m pip install --require-hashes --no-deps -r {NOX_REQUIREMENTS}",
        *(_shell(cmd) for cmd in verify_commands("$PLATFORM")),
    ]
    lines = [
        f"# Written by `{tips.nox('matrix', '--format', 'gitlab')}` from [[tool.kernodeck.platforms]] in "
        "pyproject.toml:",
        "# regenerate it rather than edit it. One job per platform (parallel:matrix); a row's RUNNER is its job tag.",
        "stages:",
        '  - "verify"',
        '  - "collect"',
        "",
        "variables:",
        '  PIP_DISABLE_PIP_VERSION_CHECK: "1"',
        "",
        "kernodeck-verify:",
        '  stage: "verify"',
        '  image: "python:${PYTHON}-slim"',
        '  timeout: "2h"',
        "  tags:",
        '    - "${RUNNER}"',
        "  parallel:",
        "    matrix:",
        *rows,
        "  script:",
        *(f"    - {_q(line)}" for line in script),
        "  artifacts:",
        '    when: "always"',
        '    expire_in: "30 days"',
        "    paths:",
        f"      - {_q(DOSSIERS + '/$PLATFORM')}",
        "",
        f"# Every platform's dossier in one folder, for `{tips.nox('compare')}` and the drift map.",
        "kernodeck-dossiers:",
        '  stage: "collect"',
        '  image: "python:3.11-slim"',
        '  when: "always"',
        "  needs:",
        '    - job: "kernodeck-verify"',
        "      artifacts: true",
        "  script:",
        f"    - {_q('ls -1 ' + DOSSIERS)}",
        "  artifacts:",
        '    expire_in: "30 days"',
        "    paths:",
        f"      - {_q(DOSSIERS)}",
    ]
    return "\n".join(lines) + "\n"


def _shell(cmd: list[str]) -> str:
    """A command for a shell line; ``$PLATFORM`` stays expandable (double quotes), everything else is quoted."""
    return " ".join(f'"{arg}"' if "$" in arg else shlex.quote(arg) for arg in cmd)


def slurm_entries(matrix: Matrix) -> list[MatrixEntry]:
    """The platforms a Slurm cluster can run (Linux ones); each one left out is logged with its reason."""
    kept: list[MatrixEntry] = []
    for entry in matrix["include"]:
        if entry["os_arch"] in SLURM_MACHINES:
            kept.append(entry)
        else:
            log(f"kernodeck: matrix: slurm: left out {entry['platform']}: {entry['os_arch']} is not a Linux node")
    if not kept:
        raise ConfigError("no declared platform is a Linux one: a Slurm array would be empty",
                          tip=f"{tips.nox('matrix', '--format', 'github')}  (hosted runners for the others)")
    return kept


def slurm(matrix: Matrix) -> str:
    """An ``sbatch`` array script: task i verifies platform i on its node, and writes the dossier under one folder.

    Submit from the project's checkout on the cluster's shared file system: ``sbatch verify.sbatch``. Each task runs
    ``nox -s lock -- --check`` and ``nox -s verify`` (a rebuild from the lock on the node); with ``KERNODECK_PYTHON``
    set (``sbatch --export=ALL,KERNODECK_PYTHON=/path/to/python``) it verifies that existing interpreter instead
    (``verify --python``). A task whose node is another machine type than its platform's stops with a message rather
    than verifying something else. The dossiers land in ``runs/ci/slurm-<array job id>/<platform>``.
    """
    entries = slurm_entries(matrix)
    gpu = any(e["backend"] in GPU_BACKENDS for e in entries)
    header = [
        "#!/bin/bash",
        f"# Written by `{tips.nox('matrix', '--format', 'slurm')}` from [[tool.kernodeck.platforms]] in "
        "pyproject.toml:",
        "# regenerate it rather than edit it. Submit from the project's checkout: sbatch THIS-FILE",
        "#SBATCH --job-name=kernodeck-verify",
        f"#SBATCH --array=0-{len(entries) - 1}",
        "#SBATCH --ntasks=1",
        "#SBATCH --time=02:00:00",
        "#SBATCH --output=kernodeck-verify-%A_%a.log",
    ]
    if gpu:
        header += ["# A GPU platform is in the array: each task asks for one GPU (sbatch directives are array-wide).",
                   "#SBATCH --gres=gpu:1"]
    # Which node each task needs: with several machine types, submit each group to its partition, e.g.
    # `sbatch --array=0,1 --partition=x86 THIS-FILE` and `sbatch --array=2 --partition=arm THIS-FILE`.
    header += ["# Array tasks (index: platform, node machine type):",
               *(f"#   {i}: {e['platform']} ({SLURM_MACHINES[e['os_arch']]})" for i, e in enumerate(entries))]
    platforms = " ".join(shlex.quote(e["platform"]) for e in entries)
    machines = " ".join(shlex.quote(SLURM_MACHINES[e["os_arch"]]) for e in entries)
    lock_check, verify = verify_commands("PLATFORM")
    body = [
        "set -euo pipefail",
        "",
        f"PLATFORMS=({platforms})",
        f"MACHINES=({machines})",
        "TASK=${SLURM_ARRAY_TASK_ID:?run by sbatch as an array task (sbatch THIS-FILE)}",
        'if [ "$TASK" -lt 0 ] || [ "$TASK" -ge "${#PLATFORMS[@]}" ]; then',
        '  echo "kernodeck: array task $TASK: no platform (0..$((${#PLATFORMS[@]} - 1)))" >&2',
        "  exit 2",
        "fi",
        'PLATFORM="${PLATFORMS[$TASK]}"',
        'if [ "$(uname -m)" != "${MACHINES[$TASK]}" ]; then',
        '  echo "kernodeck: $PLATFORM needs a ${MACHINES[$TASK]} node; this one is $(uname -m):'
        ' submit this task to such a partition (sbatch --array=$TASK --partition=...)" >&2',
        "  exit 3",
        "fi",
        'cd "${SLURM_SUBMIT_DIR:-.}"',
        'NOX="${KERNODECK_NOX:-nox}"',
        'OUT="runs/ci/slurm-${SLURM_ARRAY_JOB_ID:-local}"',
        'echo "kernodeck: array task $TASK: $PLATFORM on $(hostname), dossier $OUT/$PLATFORM"',
        _slurm_line(lock_check),
        'if [ -n "${KERNODECK_PYTHON:-}" ]; then',
        "  " + _slurm_line([*verify[:-2], "--python", "KERNODECK_PYTHON", "--out", "OUT"]),
        "else",
        "  " + _slurm_line([*verify[:-2], "--out", "OUT"]),
        "fi",
        f'echo "kernodeck: compare two dossiers with: {tips.nox("compare", "$OUT/<platform-a>", "$OUT/<platform-b>")}"',
    ]
    return "\n".join([*header, "", *body]) + "\n"


_VARS = {"PLATFORM": '"$PLATFORM"', "KERNODECK_PYTHON": '"$KERNODECK_PYTHON"', "OUT": '"$OUT/$PLATFORM"'}


def _slurm_line(cmd: list[str]) -> str:
    """One job step: ``srun`` (so that Slurm accounts and signals it) of the nox command, the variables expanded."""
    words = ['"$NOX"' if arg == "nox" else _VARS.get(arg, shlex.quote(arg)) for arg in cmd]
    return "srun " + " ".join(words)


def emit(project: Project, built: Matrix, fmt: Format, out: Path | None) -> str:
    """What ``matrix`` prints; with ``out``, also written there (a file Kernodeck may replace, checked first).

    Each engine's file is written with its sidecar record (a later ``--out`` there may replace it: the same command
    run again); another engine's than GitHub's is printed whole too.
    """
    from kernodeck import outdir

    if fmt is not Format.GITHUB:
        text = render(fmt, built)
        if out:
            target = outdir.check_file(out, what="the matrix", root=project.root, allowed=(project.runs,),
                                       tip=tips.nox("matrix", "--format", str(fmt), "--out", "FILE"))
            outdir.write_file(target, text, f"matrix-{fmt}")
        return text
    if out:
        # the TIP names a place the check accepts (under runs/), not one it refuses in turn
        runs = project.runs.relative_to(project.root) if project.runs.is_relative_to(project.root) else project.runs
        target = outdir.check_file(out, what="the matrix", tip=tips.nox("matrix", "--out", f"{runs}/matrix.json"),
                                   root=project.root, allowed=(project.runs,))
        write_github(built, target)
    return render_github(built) + "\n"
