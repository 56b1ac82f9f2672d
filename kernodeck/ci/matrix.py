"""The CI matrix: one GitHub Actions job per declared platform (``[[tool.kernodeck.platforms]]`` in pyproject.toml).

    python -m kernodeck matrix            # {"include": [...]} on one line, for `fromJSON()` in a workflow

Each entry names the platform id the sessions take (``--platform``), the runner labels (``runs-on``), the Python
version to set up, the variant and the backend the probe must find there. A runner label that starts with
``self-hosted`` is a self-hosted machine (GPUs): its ``runs-on`` is ``[self-hosted, <label>]`` so that a hosted
runner can never pick the job up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from kernodeck import outdir
from kernodeck._proc import log
from kernodeck.errors import ConfigError
from kernodeck.project.config import Project

SELF_HOSTED = "self-hosted"


class MatrixEntry(TypedDict):
    platform: str
    python: str
    os_arch: str
    variant: str
    backend: str
    runner: str
    runs_on: list[str]
    self_hosted: bool


class Matrix(TypedDict):
    include: list[MatrixEntry]


def build(
    project: Project,
    *,
    hosted_only: bool = False,
    locked_only: bool = False,
    runners: frozenset[str] | None = None,
) -> Matrix:
    """Every declared platform, in declaration order; refuses a platform without a runner or declared twice.

    ``hosted_only`` leaves out the self-hosted ones: a pull request from a fork must never reach a self-hosted runner.
    ``locked_only`` leaves out a platform with no committed lock (its verify could only fail: the lock workflow makes
    it on its runner first). ``runners``: the self-hosted runner labels this repository declares it has (None: take
    every declared platform as placeable); a self-hosted row for another label would wait in the queue forever.
    Each platform left out is logged with its reason.
    """
    if not project.platforms:
        raise ConfigError("pyproject.toml declares no [[tool.kernodeck.platforms]]: the matrix would be empty")
    include: list[MatrixEntry] = []
    left_out: list[str] = []
    seen: set[str] = set()
    for plat in project.platforms:
        if plat.id in seen:
            raise ConfigError(f"platform {plat.id} is declared twice in [[tool.kernodeck.platforms]]")
        seen.add(plat.id)
        runner = plat.runner.strip()
        if not runner:
            raise ConfigError(
                f"platform {plat.id} has no runner label; CI cannot place it",
                tip='add runner = "ubuntu-24.04" (or a self-hosted label) to its [[tool.kernodeck.platforms]] entry',
            )
        self_hosted = runner.startswith(SELF_HOSTED)
        if hosted_only and self_hosted:
            left_out.append(f"{plat.id}: self-hosted ({runner}), and this run takes hosted runners only")
            continue
        if self_hosted and runners is not None and runner not in runners:
            left_out.append(f"{plat.id}: its runner {runner} is not among the self-hosted runners this repository "
                            f"declares ({', '.join(sorted(runners)) or 'none'})")
            continue
        if locked_only and not (project.lockfiles / f"{plat.id}.txt").exists():
            left_out.append(f"{plat.id}: no committed lock (the lock workflow makes it on its runner)")
            continue
        include.append(
            MatrixEntry(
                platform=plat.id,
                python=plat.python,
                os_arch=plat.os_arch,
                variant=plat.variant,
                backend=str(project.variant(plat.variant).backend),
                runner=runner,
                runs_on=[SELF_HOSTED, runner] if self_hosted and runner != SELF_HOSTED else [runner],
                self_hosted=self_hosted,
            )
        )
    for line in left_out:
        log(f"kernodeck: matrix: left out {line}")
    if not include:
        raise ConfigError(f"every declared platform was left out, the matrix would be empty: {'; '.join(left_out)}")
    return Matrix(include=include)


def parse_runners(text: str | None) -> frozenset[str] | None:
    """``--self-hosted-runners`` as a workflow passes it: labels separated by commas or spaces; None when not given."""
    if text is None:
        return None
    return frozenset(label for label in text.replace(",", " ").split() if label)


def render(matrix: Matrix) -> str:
    """One line: GitHub's ``$GITHUB_OUTPUT`` takes ``name=value`` per line."""
    return json.dumps(matrix, separators=(",", ":"))


def write(matrix: Matrix, out: Path) -> None:
    """Write the matrix to ``out`` (checked by :func:`kernodeck.outdir.check_file`), signed by its sidecar record."""
    outdir.write_file(out, render(matrix) + "\n", "matrix")
