"""A container of the verified env: a Dockerfile and an Apptainer definition for one platform.

    python -m kernodeck export --format dockerfile --out DIR [--platform ID]
    python -m kernodeck export --format apptainer --out DIR [--platform ID]

Both start from the platform's base image (:mod:`kernodeck.dossier.baseimage`: pinned by digest, or a floating tag
said to be one; no ``--platform`` in ``FROM``: the target is chosen at build time), install Kernodeck's tools in their
own venv with ``--require-hashes`` from the hashed file written beside (:mod:`kernodeck.dossier.toolpins`), copy only
what verify reads (:func:`project_items`; a ``Dockerfile.dockerignore`` beside allows nothing else; each path in the
form its file's reader reads back as that path, or refused: :mod:`kernodeck.dossier.copylines`), install the
platform's lock with pip alone, ``--require-hashes``, into a fresh venv (the same commands ``procedure.md`` records for
a replay by hand: both come from :func:`kernodeck.runformat.review.pip_steps`), and run ``verify --python`` on the
env's interpreter when the container runs (a GPU exists at run time, not at build time). Nothing is built here; the
files name only the declared public indexes, never this machine's sources.
"""

from __future__ import annotations

import enum
import shlex
from pathlib import Path
from typing import assert_never

from kernodeck import tips
from kernodeck.dossier import baseimage, copylines, toolpins
from kernodeck.dossier.baseimage import BaseImage
from kernodeck.errors import ConfigError
from kernodeck.lock.inputs import all_input_files
from kernodeck.project.assets import Source, SourceKind
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.runformat.review import VENV, pip_steps
from kernodeck.sources import PYPI, public_url
from kernodeck.verify import context

# Inside the container: the project, and Kernodeck's own venv (the orchestrator never lives in the rebuilt env).
WORKDIR = "/project"
TOOLS_VENV = "/opt/kernodeck"
# The hashed tools file inside the image.
TOOLS_FILE = f"/opt/{toolpins.FILE_NAME}"
# Docker's name of each Linux OS/arch a container can be (a macOS platform has no container): what `docker build
# --platform` takes, written in the file's comment (never in FROM: hadolint DL3029).
DOCKER_PLATFORMS = {"linux_x86_64": "linux/amd64", "linux_aarch64": "linux/arm64"}


class Format(enum.StrEnum):
    DOCKERFILE = "dockerfile"
    APPTAINER = "apptainer"


def index_args(plat: Platform) -> str:
    """The index option of the pip install: the variant's declared index beside PyPI (none when it is PyPI); the
    same text verify gives procedure.md when no mirror replaces the index."""
    declared = plat.variant.index.rstrip("/")
    return "" if declared == PYPI else f"--extra-index-url {public_url(declared)}"


def image(project: Project, plat: Platform, override: str | None = None) -> BaseImage:
    """The platform's base image (:func:`kernodeck.dossier.baseimage.resolve`); a platform no container can be is
    refused first."""
    if plat.os_arch not in DOCKER_PLATFORMS:
        raise ConfigError(
            f"platform {plat.id} runs on {plat.os_arch}: a container is Linux ({', '.join(DOCKER_PLATFORMS)})",
            tip=tips.nox("export", "--platform", "cp311-linux_x86_64-cpu", "--format", "dockerfile", "--out",
                         "runs/export"),
        )
    return baseimage.resolve(project, plat, override)


def _holds(root: Path, rel: str | Path) -> bool:
    """Whether the project here has ``rel``, inside it (a link out of the project is not the project's)."""
    return (root / rel).exists() and (root / rel).resolve().is_relative_to(root)


def _copied(root: Path, rel: str) -> str:
    """What the image copies for a path the application reads: a folder as itself, a file by its folder (one line
    for a package's folder, not one per file of a glob; the closed world refuses any file of it not declared), a
    file at the top as itself."""
    parent = Path(rel).parent
    return rel if (root / rel).is_dir() or parent == Path() else parent.as_posix()


def project_items(project: Project, plat: Platform) -> list[str]:
    """What verify reads, relative to the project, outermost first. What the session needs: pyproject.toml and the
    noxfile, the lock inputs' folders (the files they name by ``-r``/``-c`` too), the lockfiles, the reference, and
    Kernodeck itself when it is vendored. What the declared application reads, from the declaration verify reads
    (:meth:`kernodeck.verify.context.Declaration.project_paths`: its sources, sample, resume's train file, and the
    ``path`` sources inside the project), each by :func:`_copied`. Never tests, docs, outputs, envs or caches."""
    root = project.root.resolve()
    wanted: list[str | Path] = ["pyproject.toml", "noxfile.py", project.lockfiles, project.reference]
    try:  # the files the inputs name by -r/-c too: the lock check fingerprints them
        inputs = all_input_files(project, plat)
    except ConfigError:  # one refused: the image's lock check says so itself
        inputs = [*project.requirements, plat.variant.torch_layer]
    wanted += [Path(req).parent if Path(req).parent != Path() else req for req in inputs]
    # a refused declaration reads nothing: verify then says so itself
    wanted += [_copied(root, rel) for rel in context.declaration(project).project_paths()]
    if toolpins.vendored(project):
        wanted.append("kernodeck")
    found = sorted({(root / p).resolve().relative_to(root).as_posix() for p in wanted if _holds(root, p)})
    return [p for p in found if p != "." and not any(p.startswith(f"{q}/") for q in found)]


def _beside(src: Source, root: Path) -> str:
    """How the container finds a declared source the image does not hold ("" for one it holds or the lock
    installs): verify fetches a ``url`` source itself (``runbuild.prefetch``), reads an ``hf`` one from the Hugging
    Face cache only (``local_files_only``), and a ``path`` one where the path names it."""
    if src.kind is SourceKind.PACKAGE:
        return ""
    access = src.access()
    token = f"; its token: set {access['variable']} in the container" if access else ""
    if src.kind is SourceKind.PATH:
        rel = src.in_project()
        if rel is not None and _holds(root, rel):
            return ""
        declared = str(src.declared["path"])
        at = declared if declared.startswith(("/", "~", "$")) else f"{WORKDIR}/{declared}"
        return (f"{src.role}: the path {declared} is not in the image: bind it into the container at {at}"
                + (" (its variables set there)" if "$" in declared else ""))
    if src.kind is SourceKind.HF:
        return (f"{src.role}: {src.provenance()} at {src.declared['revision']}: verify reads it from a Hugging Face "
                f"cache only, never the network: bind a cache holding it and set HF_HUB_CACHE to it there (filled "
                f"by: {src.fetch_command()}){token}")
    if src.kind is SourceKind.URL:
        return (f"{src.role}: {src.provenance()}: verify fetches it into Kernodeck's cache when the container reaches "
                f"the URL; else bind a cache holding it and set KERNODECK_CACHE to it there (filled by: "
                f"{tips.FETCH}){token}")
    assert_never(src.kind)


def needed_beside(project: Project) -> list[str]:
    """Each declared weights or data source the image does not hold, with how the container gets it (the file's
    header says them): a cache, a path outside the project or named by a variable."""
    app = context.declaration(project).app
    root = project.root.resolve()
    return [line for src in (app.assets if app is not None else ()) if (line := _beside(src, root))]


def verify_command(plat: Platform) -> list[str]:
    """What the container runs: verify of the env's interpreter, strict (the env was installed from the lock). From
    the project folder, ``-m`` imports a vendored Kernodeck (``/project/kernodeck``) before the one installed."""
    return [f"{TOOLS_VENV}/bin/python", "-m", "kernodeck", "verify", "--platform", plat.id,
            "--python", f"{WORKDIR}/{VENV}/bin/python", "--strict", "--out", f"runs/container/{plat.id}"]


def tools_install() -> str:
    """Kernodeck's own venv and its tools, every file hash-checked (pip checks that every dependency is pinned)."""
    return (f"python3 -m venv {TOOLS_VENV} && {TOOLS_VENV}/bin/python -m pip install --require-hashes "
            f"-r {TOOLS_FILE}")


def _lock_rel(project: Project, plat: Platform) -> str:
    return f"{project.lockfiles.relative_to(project.root).as_posix()}/{plat.lock_name}"


def dockerfile(project: Project, plat: Platform, tools_rel: str, override: str | None = None) -> str:
    """A Dockerfile: build with the project as context (``tools_rel``: the hashed tools file, relative to it), run
    with ``runs/`` mounted to keep the dossier."""
    base = image(project, plat, override)  # refuses a platform no container can be, before anything else
    lines = [
        "# syntax=docker/dockerfile:1",
        f"# {plat.id}: the lock installed with pip alone, --require-hashes, into a fresh venv; `verify --python` runs",
        f"# when the container runs. Written by `{tips.nox('export', '--format', 'dockerfile')}`; regenerate rather "
        "than edit.",
        f"#   docker build --platform {DOCKER_PLATFORMS[plat.os_arch]} -f THIS-FILE -t kernodeck-{plat.id} .      "
        "(from the project folder)",
        f'#   docker run --rm -v "$PWD/runs:{WORKDIR}/runs" kernodeck-{plat.id}'
        + ("   (add --gpus all)" if plat.variant.backend.value in ("cuda", "rocm") else ""),
        *_beside_lines(project, "# "),
        base.comment(),
        f"FROM {base.reference}",
        f'LABEL org.opencontainers.image.base.name="{base.reference}" kernodeck.platform="{plat.id}"',
        "ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 "
        f'{baseimage.ENV_VAR}="{base.reference}"',
        f"WORKDIR {WORKDIR}",
        copylines.docker_copy(tools_rel, TOOLS_FILE),
        f"RUN {tools_install()}",
        *(copylines.docker_copy(item, f"{WORKDIR}/{item}") for item in project_items(project, plat)),
        *(f"RUN {step}" for step in pip_steps(_lock_rel(project, plat), index_args(plat))),
        "CMD " + _json_argv(verify_command(plat)),
    ]
    return "\n".join(lines) + "\n"


def dockerignore(project: Project, plat: Platform, tools_rel: str) -> str:
    """``Dockerfile.dockerignore`` (BuildKit reads it beside the Dockerfile): the context sends only what is copied,
    never runs/, the rebuilt envs or .git."""
    allowed = [tools_rel, *project_items(project, plat)]
    return (f"# Written by `{tips.nox('export', '--format', 'dockerfile')}`: the build context is the project; only "
            "what the Dockerfile copies is sent.\n"
            "*\n" + "".join(copylines.dockerignore_allow(item) + "\n" for item in allowed) + "**/__pycache__\n")


def _beside_lines(project: Project, indent: str) -> list[str]:
    needed = needed_beside(project)
    head = ["Declared sources the image does not hold: the container needs them beside it (verify fails without):"]
    return [f"{indent}{line}" for line in head + [f"  {n}" for n in needed]] if needed else []


def _json_argv(argv: list[str]) -> str:
    import json

    return json.dumps(argv)


def apptainer(project: Project, plat: Platform, tools_src: str, override: str | None = None) -> str:
    """An Apptainer definition: ``apptainer build kernodeck.sif THIS-FILE`` from the project folder, then
    ``apptainer run --writable-tmpfs kernodeck.sif`` (``--nv`` for CUDA, ``--rocm`` for ROCm); the dossier is
    written under the folder it is run from. ``tools_src``: the hashed tools file (relative to the project, or
    absolute)."""
    base = image(project, plat, override)
    lock_rel = _lock_rel(project, plat)
    flag = {"cuda": " --nv", "rocm": " --rocm"}.get(plat.variant.backend.value, "")
    verify = verify_command(plat)[:-1]
    lines = [
        "Bootstrap: docker",
        f"From: {base.reference}",
        base.comment(),
        "",
        "%labels",
        f"    org.opencontainers.image.base.name {base.reference}",
        f"    kernodeck.platform {plat.id}",
        f"    kernodeck.lock {lock_rel}",
        "",
        "%help",
        f"    {plat.id}: the lock installed with pip alone, --require-hashes, into a fresh venv; `verify --python`",
        f"    runs when the container runs. Written by `{tips.nox('export', '--format', 'apptainer')}`: regenerate, "
        "do not edit.",
        "    apptainer build kernodeck.sif THIS-FILE        (from the project folder)",
        f"    apptainer run --writable-tmpfs{flag} kernodeck.sif",
        *_beside_lines(project, "    "),
        "",
        "%files",
        f"    {copylines.apptainer_files(tools_src, TOOLS_FILE)}",
        *(f"    {copylines.apptainer_files(item, f'{WORKDIR}/{item}')}" for item in project_items(project, plat)),
        "",
        "%environment",
        f"    export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 {baseimage.ENV_VAR}={base.reference}",
        "",
        "%post",
        "    set -eu",
        "    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1",
        f"    {tools_install()}",
        f"    cd {WORKDIR}",
        *(f"    {step}" for step in pip_steps(lock_rel, index_args(plat))),
        "",
        "%runscript",
        '    out="$PWD/kernodeck-dossier"',
        f"    cd {WORKDIR} || exit 1",
        "    exec " + " ".join(shlex.quote(a) for a in verify) + ' "$out" "$@"',
    ]
    return "\n".join(lines) + "\n"


FILE_NAMES = {Format.DOCKERFILE: "Dockerfile", Format.APPTAINER: "kernodeck.def"}


def render(fmt: Format, project: Project, plat: Platform, tools_src: str, override: str | None = None) -> str:
    if fmt is Format.DOCKERFILE:
        return dockerfile(project, plat, tools_src, override)
    if fmt is Format.APPTAINER:
        return apptainer(project, plat, tools_src, override)
    assert_never(fmt)


def tools_source(fmt: Format, project: Project, out: Path) -> str:
    """Where the file names the hashed tools file written into ``out``: relative to the project (Docker's build
    context is the project, so ``out`` must be inside it), or absolute for Apptainer when ``out`` is outside."""
    path = out.resolve() / toolpins.FILE_NAME
    root = project.root.resolve()
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    if fmt is Format.DOCKERFILE:
        raise ConfigError(f"{out} is outside the project: Docker's build context is the project, and the Dockerfile "
                          f"copies {toolpins.FILE_NAME} from beside it",
                          tip=tips.nox("export", "--format", "dockerfile", "--out", "runs/export"))
    if fmt is Format.APPTAINER:
        return str(path)
    assert_never(fmt)


def written(fmt: Format, out: Path) -> list[Path]:
    """Every file :func:`write` writes into ``out``: the container file, the hashed tools file, Docker's ignore."""
    names = [FILE_NAMES[fmt], toolpins.FILE_NAME] + ([f"{FILE_NAMES[fmt]}.dockerignore"]
                                                       if fmt is Format.DOCKERFILE else [])
    return [out / name for name in names]


def write(fmt: Format, project: Project, plat: Platform, out: Path, base_image: str | None = None) -> Path:
    """Write the file into the folder ``out`` (made if missing), with the hashed tools file (and for Docker the
    ``Dockerfile.dockerignore``) beside it, each with its sidecar record (outdir.write_file: a later export there may
    replace it; the caller checked each path with outdir.check_file); returns the file's path."""
    from kernodeck import outdir

    if not (project.lockfiles / plat.lock_name).is_file():
        raise ConfigError(f"no committed lock for {plat.id}: the container would install nothing verified",
                          tip=tips.nox("lock", "--platform", plat.id))
    tools_src = tools_source(fmt, project, out)
    # a bad platform or image, or a path with no form in a file (copylines), is refused before anything is written
    text = render(fmt, project, plat, tools_src, base_image)
    ignore = dockerignore(project, plat, tools_src) if fmt is Format.DOCKERFILE else None
    out.mkdir(parents=True, exist_ok=True)
    outdir.write_file(out / toolpins.FILE_NAME, toolpins.hashed_file(project), "export-tools")
    if ignore is not None:
        outdir.write_file(out / f"{FILE_NAMES[fmt]}.dockerignore", ignore, "export-dockerignore")
    path = out / FILE_NAMES[fmt]
    outdir.write_file(path, text, f"export-{fmt}")
    return path
