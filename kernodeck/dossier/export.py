"""A container of the verified env: a Dockerfile and an Apptainer definition for one platform.

    python -m kernodeck export --format dockerfile --out DIR [--platform ID]
    python -m kernodeck export --format apptainer --out DIR [--platform ID]

Both start from the platform's Python image (``python:3.11-slim`` for cp311), copy the project in, install the
platform's lock with pip alone, ``--require-hashes``, into a fresh venv (the same commands ``procedure.md`` records for
a replay by hand: both come from :func:`pip_steps`), install Kernodeck beside it in its own venv, and run
``verify --python`` on the env's interpreter when the container runs (a GPU exists at run time, not at build time).
Nothing is built here; the files name only the declared public indexes, never this machine's sources.
"""

from __future__ import annotations

import enum
import shlex
from pathlib import Path
from typing import assert_never

from kernodeck import __version__, tips
from kernodeck.errors import ConfigError
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.sources import PYPI, public_url

# The rebuilt env's folder as procedure.md names it (relative to the project).
VENV = ".venv-rebuild"
# Inside the container: the project, and Kernodeck's own venv (the orchestrator never lives in the rebuilt env).
WORKDIR = "/project"
TOOLS_VENV = "/opt/kernodeck"
# Docker's name of each Linux OS/arch a container can be (a macOS platform has no container).
DOCKER_PLATFORMS = {"linux_x86_64": "linux/amd64", "linux_aarch64": "linux/arm64"}
# What is never copied into the image: Kernodeck's outputs, envs, caches and version control.
_SKIP = {"runs", ".venv-rebuild", ".nox", ".git", ".wheelhouse", "__pycache__", ".mypy_cache", ".ruff_cache",
         ".pytest_cache", "Dockerfile", "kernodeck.def"}


class Format(enum.StrEnum):
    DOCKERFILE = "dockerfile"
    APPTAINER = "apptainer"


def index_args(plat: Platform) -> str:
    """The index option of the pip install: the variant's declared index beside PyPI (none when it is PyPI); the
    same text verify gives procedure.md when no mirror replaces the index."""
    declared = plat.variant.index.rstrip("/")
    return "" if declared == PYPI else f"--extra-index-url {public_url(declared)}"


def pip_steps(lock_rel: str, index: str, *, venv: str = VENV) -> list[str]:
    """The commands that make the env with pip alone: a fresh venv, the hash-checked install of the lock (handed to
    pip as a file), pip's own consistency check. procedure.md and the container files both show exactly these."""
    return [
        f"python3 -m venv {venv}",
        " ".join([f"{venv}/bin/python -m pip install --require-hashes --no-deps", *([index] if index else []),
                  f"-r {lock_rel}"]),
        f"{venv}/bin/python -m pip check",
    ]


def image(plat: Platform) -> str:
    """The platform's Python image: ``python:<X.Y>-slim`` (Debian; glibc, so manylinux wheels install)."""
    if plat.os_arch not in DOCKER_PLATFORMS:
        raise ConfigError(
            f"platform {plat.id} runs on {plat.os_arch}: a container is Linux ({', '.join(DOCKER_PLATFORMS)})",
            tip=tips.nox("export", "--platform", "cp311-linux_x86_64-cpu", "--format", "dockerfile", "--out", "DIR"),
        )
    return f"python:{plat.python}-slim"


def project_items(project: Project) -> list[str]:
    """The project's top-level files and folders the container needs (not its outputs, envs or caches)."""
    skip = _SKIP | {project.runs.name, project.venv_root.name}
    return sorted(p.name for p in project.root.iterdir() if p.name not in skip and not p.name.startswith("."))


def kernodeck_install(project: Project) -> list[str]:
    """pip arguments installing Kernodeck into its own venv: this checkout when the project is Kernodeck itself,
    else the version that writes the file; with the pinned tools of the project's run group."""
    own = (project.root / "kernodeck" / "__init__.py").is_file()
    return [*run_group(project), *(["--no-deps", "."] if own else [f"kernodeck=={__version__}"])]


def run_group(project: Project) -> list[str]:
    """The requirements of the tools' run group (``kernodeck-run``, or ``run`` in Kernodeck's checkout), includes
    followed."""
    import tomllib

    from kernodeck.noxsessions import tool_groups

    data = tomllib.loads((project.root / "pyproject.toml").read_text(encoding="utf-8"))
    groups = data.get("dependency-groups", {})

    def expand(name: str, seen: tuple[str, ...] = ()) -> list[str]:
        if name in seen:
            raise ConfigError(f"[dependency-groups] {name} includes itself")
        out: list[str] = []
        for item in groups.get(name, []):
            out += expand(item["include-group"], (*seen, name)) if isinstance(item, dict) else [str(item)]
        return out

    return expand(tool_groups(data)["run"])


def verify_command(plat: Platform) -> list[str]:
    """What the container runs: verify of the env's interpreter, strict (the env was installed from the lock)."""
    return [f"{TOOLS_VENV}/bin/python", "-m", "kernodeck", "verify", "--platform", plat.id,
            "--python", f"{WORKDIR}/{VENV}/bin/python", "--strict", "--out", f"runs/container/{plat.id}"]


def dockerfile(project: Project, plat: Platform) -> str:
    """A Dockerfile: build with the project as context, run with ``runs/`` mounted to keep the dossier."""
    base = image(plat)  # refuses a platform no container can be, before anything else is looked up
    lock_rel = f"{project.lockfiles.relative_to(project.root).as_posix()}/{plat.lock_name}"
    lines = [
        "# syntax=docker/dockerfile:1",
        f"# {plat.id}: the lock installed with pip alone, --require-hashes, into a fresh venv; `verify --python` runs",
        f"# when the container runs. Written by `{tips.nox('export', '--format', 'dockerfile')}`; regenerate rather "
        "than edit.",
        f"#   docker build -f THIS-FILE -t kernodeck-{plat.id} .      (from the project folder)",
        f'#   docker run --rm -v "$PWD/runs:{WORKDIR}/runs" kernodeck-{plat.id}'
        + ("   (add --gpus all)" if plat.variant.backend.value in ("cuda", "rocm") else ""),
        f"FROM --platform={DOCKER_PLATFORMS[plat.os_arch]} {base}",
        "ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1",
        f"WORKDIR {WORKDIR}",
        *(f"COPY {item} {WORKDIR}/{item}" for item in project_items(project)),
        *(f"RUN {step}" for step in pip_steps(lock_rel, index_args(plat))),
        f"RUN python3 -m venv {TOOLS_VENV} && {TOOLS_VENV}/bin/python -m pip install "
        + " ".join(shlex.quote(a) for a in kernodeck_install(project)),
        "CMD " + _json_argv(verify_command(plat)),
    ]
    return "\n".join(lines) + "\n"


def _json_argv(argv: list[str]) -> str:
    import json

    return json.dumps(argv)


def apptainer(project: Project, plat: Platform) -> str:
    """An Apptainer definition: ``apptainer build kernodeck.sif THIS-FILE`` from the project folder, then
    ``apptainer run --writable-tmpfs kernodeck.sif`` (``--nv`` for CUDA, ``--rocm`` for ROCm); the dossier is
    written under the folder it is run from."""
    lock_rel = f"{project.lockfiles.relative_to(project.root).as_posix()}/{plat.lock_name}"
    flag = {"cuda": " --nv", "rocm": " --rocm"}.get(plat.variant.backend.value, "")
    verify = verify_command(plat)[:-1]
    lines = [
        "Bootstrap: docker",
        f"From: {image(plat)}",
        "",
        "%labels",
        f"    kernodeck.platform {plat.id}",
        f"    kernodeck.lock {lock_rel}",
        "",
        "%help",
        f"    {plat.id}: the lock installed with pip alone, --require-hashes, into a fresh venv; `verify --python`",
        f"    runs when the container runs. Written by `{tips.nox('export', '--format', 'apptainer')}`: regenerate, "
        "do not edit.",
        "    apptainer build kernodeck.sif THIS-FILE        (from the project folder)",
        f"    apptainer run --writable-tmpfs{flag} kernodeck.sif",
        "",
        "%files",
        *(f"    {item} {WORKDIR}/{item}" for item in project_items(project)),
        "",
        "%environment",
        "    export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1",
        "",
        "%post",
        "    set -eu",
        "    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1",
        f"    cd {WORKDIR}",
        *(f"    {step}" for step in pip_steps(lock_rel, index_args(plat))),
        f"    python3 -m venv {TOOLS_VENV}",
        f"    {TOOLS_VENV}/bin/python -m pip install " + " ".join(shlex.quote(a) for a in kernodeck_install(project)),
        "",
        "%runscript",
        '    out="$PWD/kernodeck-dossier"',
        f"    cd {WORKDIR}",
        "    exec " + " ".join(shlex.quote(a) for a in verify) + ' "$out" "$@"',
    ]
    return "\n".join(lines) + "\n"


FILE_NAMES = {Format.DOCKERFILE: "Dockerfile", Format.APPTAINER: "kernodeck.def"}


def render(fmt: Format, project: Project, plat: Platform) -> str:
    if fmt is Format.DOCKERFILE:
        return dockerfile(project, plat)
    if fmt is Format.APPTAINER:
        return apptainer(project, plat)
    assert_never(fmt)


def write(fmt: Format, project: Project, plat: Platform, out: Path) -> Path:
    """Write the file into the folder ``out`` (made if missing); returns its path."""
    from kernodeck._fs import write_atomic

    if not (project.lockfiles / plat.lock_name).is_file():
        raise ConfigError(f"no committed lock for {plat.id}: the container would install nothing verified",
                          tip=tips.nox("lock", "--platform", plat.id))
    text = render(fmt, project, plat)
    path = out / FILE_NAMES[fmt]
    write_atomic(path, text)
    return path
