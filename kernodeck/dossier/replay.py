"""replay: clone the current commit into an empty folder and run verify there with a clean environment.

A replay proves the procedure is transferable only if nothing comes from the caller: no venv, no PYTHONPATH, no cwd,
no uncommitted file, and no package configuration of this machine (see :func:`clean_environment`): only the declared
indexes, PyPI and the documented mirrors can serve a file. So a dirty tree is refused (or, with --allow-dirty, named
in the result), the clone gets its own tools venv made from the base interpreter, and the rebuilt env is made from
the committed lock, from scratch, with the platform's Python found on this machine. The whole repository is cloned
(its top folder: a project may be a folder of it, a monorepo's ``examples/digits``) and the verify runs in the
project's folder of the clone. The declared weights and data are found where the caller's own verify finds them (the
Hugging Face and Kernodeck caches, the home of a path's ``~``: :func:`source_places`), each file checked by sha256.

The tools venv gets the project's pinned run group (``kernodeck-run`` in a project ``kernodeck init`` made, ``run`` in
Kernodeck's own checkout: :func:`kernodeck.noxsessions.tool_groups`) and, in a user's project, Kernodeck itself from
``$KERNODECK_SOURCE`` (a folder or a requirement; the nox session sets it to what it installed), else the installed
version, as the nox sessions install it (:func:`kernodeck.noxsessions.install_args`). Kernodeck's own checkout runs
the clone's own code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kernodeck import noxsessions, outdir, tips
from kernodeck._fs import write_json
from kernodeck._proc import log, run, run_with_progress, uv_available
from kernodeck.env import pythons
from kernodeck.errors import CommandFailed, DirtyTree, KernodeckError
from kernodeck.inenv.protocol import USER_HOME_ENV
from kernodeck.project import assets, fetch
from kernodeck.project.config import Project
from kernodeck.project.deadlines import SCALE_ENV
from kernodeck.project.platforms import resolve_platform


@dataclass
class ReplayResult:
    commit: str
    dirty: list[str]
    dossier: Path
    status: str
    seconds: float


def _git(root: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KernodeckError(
            f"git {' '.join(args)} failed in {root}: {getattr(exc, 'stderr', '') or exc}",
            tip="replay needs a git checkout with at least one commit",
        ) from None


# A machine with no package configuration lacks these: pip's, uv's and XDG's settings, a caller's Python, venv, conda,
# nox or pytest, and Kernodeck's own switches, except the documented ones passed below.
_DROP = ("PIP_", "UV_", "XDG_", "PYTHON", "VIRTUAL_ENV", "CONDA", "NOX", "PYTEST", "PYENV_VERSION", "KERNODECK_")
# Passed through: each variant's documented mirror (KERNODECK_INDEX_<VARIANT>), the platform Python's switches, and
# the run's policy the caller chose (the variant, the deadlines' scale: ``replay --deadline-scale X`` sets it).
_PASS_PREFIXES = ("KERNODECK_INDEX_",)
_PASS = (pythons.EXPLICIT_VAR, pythons.DOWNLOADS_VAR, "KERNODECK_VARIANT", SCALE_ENV)


def source_places() -> dict[str, str]:
    """Where the caller's verify finds the declared sources, as absolute variables for the replay's (whose HOME and
    XDG_CACHE_HOME are empty folders): the Hugging Face hub cache as huggingface_hub resolves it (``HF_HUB_CACHE``),
    Kernodeck's url cache as its in-env side does (``KERNODECK_CACHE``), and the home a path source's ``~`` names
    (``KERNODECK_USER_HOME``). Sharing them weakens nothing: every file found there is checked by sha256 against the
    reference's fingerprints; none is a package configuration."""
    cwd = Path.cwd()  # a relative place is the caller's working folder's, as for the caller's own verify
    home = os.environ.get(USER_HOME_ENV) or os.path.expanduser("~")
    return {"HF_HUB_CACHE": str(cwd / assets.hf_cache()), "KERNODECK_CACHE": str(cwd / fetch.cache_root()),
            USER_HOME_ENV: str(cwd / home)}


def _uv_cache() -> str | None:
    """The caller's uv cache folder: files by hash, never a source (kept as a speed-up, like a download cache)."""
    uv = uv_available()
    if uv is None:
        return None
    try:
        proc = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def clone_commit(root: Path, commit: str, clone: Path, env: dict[str, str]) -> Path:
    """``commit`` of the repository ``root`` is in, cloned into ``clone`` (git clones a repository's top folder, never
    a folder inside it); the project's folder in the clone: ``root``'s place in its repository (a monorepo's
    ``examples/digits``)."""
    top = _git(root, "rev-parse", "--show-toplevel").strip()
    prefix = _git(root, "rev-parse", "--show-prefix").strip()
    run(["git", "clone", "--quiet", "--no-hardlinks", top, str(clone)], env=env)
    run(["git", "-C", str(clone), "checkout", "--quiet", commit], env=env)
    project = clone / prefix if prefix else clone
    if not (project / "pyproject.toml").is_file():
        raise KernodeckError(f"the commit {commit[:12]} has no {prefix}pyproject.toml: the project is not committed",
                             tip=f"git add {root / 'pyproject.toml'} (and the project's files), commit, then: "
                             + tips.nox("replay"))
    return project


def _own_checkout(clone: Path, pyproject: dict[str, object]) -> bool:
    """The project is Kernodeck itself: ``python -m kernodeck`` in the clone runs the clone's own code."""
    project = pyproject.get("project")
    return isinstance(project, dict) and project.get("name") == "kernodeck" and (clone / "kernodeck").is_dir()


def kernodeck_install(environ: dict[str, str] | None = None) -> list[str]:
    """The pip arguments that install, into a user project's replay tools venv, the Kernodeck running now:
    ``$KERNODECK_SOURCE`` when set (a folder or a requirement), else this version from the package index."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pin = f"kernodeck=={version('kernodeck')}"
    except PackageNotFoundError:
        pin = None
    source = noxsessions.kernodeck_source(pin, environ)
    if source is None:
        raise KernodeckError(
            "this Kernodeck is not installed as a package, so the replay cannot install it in the clean clone",
            tip=f"export {noxsessions.SOURCE_ENV}=/path/to/a/kernodeck/checkout (or kernodeck==VERSION), "
            f"then: {tips.nox('replay')}",
        )
    return noxsessions.install_args(source, "pip")


def clean_environment(home: Path, base_python: str | None = None) -> dict[str, str]:
    """A machine with no package configuration: an empty HOME and config folders, ``PIP_CONFIG_FILE=/dev/null`` (pip
    reads no file, /etc/pip.conf included), ``UV_NO_CONFIG=1``, no ``PIP_*``/``UV_*`` variable, no caller's Python or
    venv on PATH. Only the declared indexes, PyPI and the documented mirrors (``KERNODECK_INDEX_<VARIANT>``) can
    serve a file. Kept: PATH's tools, proxies and CA settings (network, not packages), a netrc (credentials only),
    the uv cache (files by hash), the platform's Python found here (``KERNODECK_BASE_PYTHON``), the deadlines' scale,
    the ``HF_*`` variables (``HF_HUB_OFFLINE`` as the caller has it) and the sources' places (:func:`source_places`)."""
    venv = os.environ.get("VIRTUAL_ENV")
    own_bin = str(Path(sys.prefix) / "bin") if sys.prefix != sys.base_prefix else None
    path = [
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if p and p != own_bin and not (venv and p.startswith(venv)) and "/.nox/" not in p
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PATH" and (not k.startswith(_DROP) or k.startswith(_PASS_PREFIXES) or k in _PASS)
    }
    for folder in (".config", ".cache", ".local/share", ".xdg-config-dirs"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    netrc = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CONFIG_DIRS=str(home / ".xdg-config-dirs"),  # no /etc/xdg/pip/pip.conf, no /etc/xdg/uv/uv.toml
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local/share"),
        PIP_CONFIG_FILE=os.devnull,
        UV_NO_CONFIG="1",
        PYTHONNOUSERSITE="1",
        PATH=os.pathsep.join(path),
    )
    env.update(source_places())
    if os.path.isfile(netrc):
        env["NETRC"] = netrc
    cache = _uv_cache()
    if cache:
        env["UV_CACHE_DIR"] = cache
    if base_python and pythons.EXPLICIT_VAR not in env:
        env[pythons.EXPLICIT_VAR] = base_python
    return env


def replay(project: Project, *, allow_dirty: bool = False, keep: bool = False, out: Path | None = None) -> ReplayResult:
    root = project.root
    dest = outdir.check(
        out or project.runs / f"replay-{time.strftime('%Y%m%d-%H%M%S')}",
        what="the replay's dossier",
        tip=f"{tips.nox('replay', '--out', f'{os.path.relpath(project.runs, root)}/NAME')}  "
        "(or a new or empty folder outside the project)",
        root=root,
        allowed=(project.runs,),
    )
    commit = _git(root, "rev-parse", "HEAD").strip()
    dirty = [
        line[3:] for line in _git(root, "status", "--porcelain", "--untracked-files=no").splitlines() if line.strip()
    ]
    if dirty and not allow_dirty:
        raise DirtyTree(f"uncommitted changes in {len(dirty)} tracked file(s): {', '.join(dirty[:5])}")
    start = time.perf_counter()
    # The platform's Python is found here, with this machine's HOME (pyenv, uv-managed Pythons), and handed over.
    plat = resolve_platform(project)
    base_python = pythons.find(plat.python, plat.os_arch).path
    work = Path(tempfile.mkdtemp(prefix="kernodeck-replay-"))
    env = clean_environment(work / "home", base_python)
    base = getattr(sys, "_base_executable", sys.executable)
    try:
        cloned = clone_commit(root, commit, work / "clone", env)  # the project's folder in the clone
        tools = work / "tools"
        run([base, "-m", "venv", str(tools)], env=env)
        pyproject = tomllib.loads((cloned / "pyproject.toml").read_text(encoding="utf-8"))
        group = noxsessions.tool_groups(pyproject)["run"]
        reqs = [r for r in pyproject.get("dependency-groups", {}).get(group, []) if isinstance(r, str)]
        if not reqs:
            raise KernodeckError(
                f"pyproject.toml has no [dependency-groups] {group}: the pinned tools the replay installs",
                tip="kernodeck init writes them (see README: Use it in your project); commit them, then: "
                + tips.nox("replay"),
            )
        tool_python = tools / "bin" / "python"
        pip: list[str | Path] = [tool_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        run([*pip, *reqs], env=env)
        if not _own_checkout(cloned, pyproject):
            run([*pip, *kernodeck_install()], env=env)
        env["PATH"] = os.pathsep.join([str(tools / "bin"), env["PATH"]])
        dossier = work / "dossier"
        log("kernodeck: replaying in a clean clone: rebuild + verify from the committed lock")
        # -E -s: no PYTHON* variables, no user site; cwd is the project's folder in the clone, so `-m kernodeck` is the
        # clone's own code in Kernodeck's checkout, the Kernodeck installed above in a user's project.
        try:
            with noxsessions.forwarding_signals():  # a signal reaches the verify, which records the run as interrupted
                run_with_progress(
                    [tool_python, "-E", "-s", "-m", "kernodeck", "verify", "--fresh", "--out", str(dossier)],
                    label="replay: verify",
                    env=env,
                    cwd=cloned,
                )
        except CommandFailed as exc:
            log(f"kernodeck: the replayed verify failed: {exc.first_error}")
        if not (dossier / "report.json").exists():
            raise KernodeckError("the replay produced no dossier", tip=f"rerun with --keep and look in {work}")
        import json

        status = json.loads((dossier / "report.json").read_text(encoding="utf-8"))["status"]
        seconds = round(time.perf_counter() - start, 1)
        # Staged beside dest and swapped in whole: dest is replaced only when it was empty or a Kernodeck folder.
        with outdir.staged(dest, "replay") as staging:
            shutil.copytree(dossier, staging, dirs_exist_ok=True)
            write_json(
                staging / "replay.json",
                {"commit": commit, "uncommitted": dirty, "status": status, "seconds": seconds,
                 "clean_environment": True,
                 "package_configuration": "none: empty HOME and config folders, PIP_CONFIG_FILE=/dev/null, "
                                          "no PIP_*/UV_* variable",
                 "mirrors": sorted(k for k in env if k.startswith(_PASS_PREFIXES)),
                 "sources_found_in": "the caller's places (each file checked by sha256): "
                                     + ", ".join(source_places())},
            )
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return ReplayResult(commit, dirty, dest, status, seconds)
