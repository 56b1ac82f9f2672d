"""Tiny hermetic locks: wheels written here, a project copy that locks only from them, and one whose lock is written.

Names are prefixed ``kdtiny-`` (or are tiny ones such as ``tinya``) so that no resolver cache can confuse them with a
real project, and every wheel is byte-for-byte reproducible (fixed zip timestamps), so hashes are the same in every
test and on every machine. Two kinds of project: ``tiny_project`` has tiny *inputs* for ``lock`` to resolve (offline,
from ``tiny_wheels``: ``offline_sources``); ``locked_tiny_project`` has a *lock* already written for installer and
wheelhouse tests (a few wheels and pip itself, from the wheel that ships with ``ensurepip``), pinned with their sha256
under the header ``nox -s lock`` writes, so that the drift check passes and ``rebuild`` takes it as a real lock.
"""

from __future__ import annotations

import base64
import ensurepip
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomlkit

from kernodeck._fs import sha256_file
from kernodeck.lock import check, lockfile
from kernodeck.lock import inputs as lock_inputs
from kernodeck.lock.write import write_pair
from kernodeck.project.config import load_project
from kernodeck.project.platforms import Platform, resolve_platform
from kernodeck.sources import Source
from tests.helpers.project import copy_project, kd

RESOLVERS = ["pip-tools", "uv"]  # both resolvers, for tests parametrized over them
UNREACHABLE = "http://127.0.0.1:9/simple"  # port 9 (discard): refused at once, never a hang
_STAMP = (2020, 1, 1, 0, 0, 0)


def write_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), *,
                module: str | None = None, payload: str = "") -> Path:
    """A minimal valid pure-Python wheel (METADATA, WHEEL, RECORD) for ``name==version``, byte-reproducible; its
    package ``__init__`` is ``module`` (default: ``VERSION = '<version>'`` followed by ``payload``)."""
    init = (f"VERSION = {version!r}\n{payload}" if module is None else module).encode()
    return wheel_of(folder, name, version, {f"{name.replace('-', '_')}/__init__.py": init}, requires=requires)


def wheel_of(folder: Path, name: str, version: str, files: dict[str, bytes], *, requires: tuple[str, ...] = (),
             tag: str = "py3-none-any") -> Path:
    """A valid wheel of ``files`` (each in its RECORD, a shipped .pyc as any file) for ``name==version`` and one
    platform ``tag``, byte-reproducible."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": ("Metadata-Version: 2.1\n" f"Name: {name}\n" f"Version: {version}\n"
                             + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
        f"{info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: kernodeck-tests\nRoot-Is-Purelib: true\n"
                          f"Tag: {tag}\n").encode(),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, date_time=_STAMP)
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data)
    return target


def tiny_wheels(folder: Path) -> Path:
    """alpha 1.0 (needs beta>=1), beta 1.0 and 2.0, tinytorch 1.0: a base layer and a 'torch' layer."""
    write_wheel(folder, "kdtiny-alpha", "1.0", ("kdtiny-beta>=1",))
    write_wheel(folder, "kdtiny-beta", "1.0")
    write_wheel(folder, "kdtiny-beta", "2.0")
    write_wheel(folder, "kdtiny-torch", "1.0")
    return folder


def tiny_project(root: Path, *, index: str = UNREACHABLE, base: str = "kdtiny-alpha\n",
                 layer: str = "kdtiny-torch==1.0\n") -> Path:
    """A copy of the project whose cpu variant locks the tiny packages; its real lockfiles removed."""
    project = copy_project(root)
    (project / "requirements" / "base.in").write_text(base, encoding="utf-8")
    (project / "requirements" / "torch-cpu.in").write_text(layer, encoding="utf-8")
    set_variant_index(project, "cpu", index)
    shutil.rmtree(project / "lockfiles")
    (project / "lockfiles").mkdir()
    return project


def set_variant_index(project: Path, variant: str, index: str) -> None:
    path = project / "pyproject.toml"
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    doc["tool"]["kernodeck"]["variants"][variant]["index"] = index  # type: ignore[index]
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def declare_as_of(project: Path, value: str | None) -> None:
    """Declare ``resolve-as-of = value`` in the project's pyproject.toml, or drop the declaration (``None``)."""
    path = project / "pyproject.toml"
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    table = doc["tool"]["kernodeck"]  # type: ignore[index]
    if value is None:
        table.pop("resolve-as-of", None)  # type: ignore[union-attr]
    else:
        table["resolve-as-of"] = value  # type: ignore[index]
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


# The source of a build backend's helper (a red-team's tinybuild: needs ``os``): the env being installed and the
# installer's pid, found on an ancestor's command line (pip's own argv[0], uv's --python).
FIND_INSTALLER = r'''def _installer():
    pid = os.getppid()
    while pid > 1:
        for arg in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0"):
            arg = arg.decode()
            if arg.endswith("/bin/python") and "/.venv-rebuild/" in arg:
                return pid, os.path.dirname(os.path.dirname(arg))
        pid = int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])
    raise SystemExit("no env being installed")
'''


def declared_tinyd(tmp_path: Path, backend: str) -> tuple[Path, Platform, dict[str, str]]:
    """A tiny lock (pip, tinya, tinyb wheels; tinyd 1.0 by its sdist only, declared built-here) whose build
    requirement tinybuild (served as a wheel from ``backends``) is the build backend ``backend`` (its source), offline,
    the user's caches its own: (project, platform, env vars)."""
    links, backends = tmp_path / "links", tmp_path / "backends"
    sdist = write_sdist(links, "tinyd", "1.0", "VALUE = 'the lock'\n", backend="tinybuild")
    wheel_of(backends, "tinybuild", "1.0", {"tinybuild/__init__.py": backend.encode()})
    project, plat = locked_tiny_project(tmp_path / "project", env_wheels(links), (("tinyd", "1.0", [sdist]),))
    declare_built_here(project, "tinyd")
    env = offline_env(PIP_FIND_LINKS=f"{links} {backends}", PIP_CACHE_DIR=str(tmp_path / "pipc"),
                      UV_CACHE_DIR=str(tmp_path / "uvc"))
    return project, plat, env


def promoted_env(project: Path) -> Path | None:
    """The env a rebuild of ``project`` promoted (its ``current``), resolved; None when none was."""
    return next((p.resolve() for p in (project / ".venv-rebuild").glob("*/current")), None)


def declare_built_here(project: Path, *names: str) -> None:
    """Declare ``built-here = [names]`` (the pins the install may build from their sdist) in the project's
    pyproject.toml."""
    path = project / "pyproject.toml"
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    doc["tool"]["kernodeck"]["built-here"] = list(names)  # type: ignore[index]
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def offline_sources(monkeypatch: pytest.MonkeyPatch, wheels: Path, cache: Path) -> None:
    """This machine's sources, for the test: no config file, no index, only ``wheels``; caches of its own."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("PIP_TOOLS_CACHE_DIR", str(cache / "pip-tools"))
    monkeypatch.setenv("UV_CACHE_DIR", str(cache / "uv"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def uv() -> str:
    found = shutil.which("uv", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if not found:
        pytest.fail("uv is not installed beside the test interpreter (the test dependency group has it)")
    return found


def fresh_venv(folder: Path, *, with_pip: bool = False) -> Path:
    """An empty venv to dry-run installs into (``with_pip``: the pip and setuptools wheels bundled with Python's
    ensurepip, installed offline by uv: what ``python -m venv`` seeds, without compiling their bytecode, which
    costs ensurepip about 3 CPU-s a venv); its interpreter."""
    quiet = {**os.environ, "UV_NO_CONFIG": "1"}
    subprocess.run([uv(), "venv", "--quiet", "--python", sys.executable, str(folder)], check=True, env=quiet,
                   capture_output=True, timeout=120)
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    assert python.exists()
    if with_pip:
        bundled = Path(ensurepip.__file__).parent / "_bundled"
        subprocess.run([uv(), "pip", "install", "--quiet", "--python", str(python), "--no-index", "--no-cache",
                        "--find-links", str(bundled), *sorted({w.name.split("-")[0] for w in bundled.glob("*.whl")})],
                       check=True, env=quiet, capture_output=True, timeout=120)
    return python


def pins(lock_path: Path) -> dict[str, str]:
    from kernodeck.lock import lockfile

    return lockfile.read(lock_path).versions()


def pip_wheel(folder: Path) -> Path:
    """The pip wheel bundled with this Python's ensurepip, copied into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    bundled = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    assert bundled, "this Python's ensurepip ships no pip wheel"
    return Path(shutil.copy2(bundled[-1], folder / bundled[-1].name))


def wheel_spec(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return name.lower(), version


def offline_env(**extra: str) -> dict[str, str]:
    """Every package source disabled: no config file, no index, no network; callers add only local find-links."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        UV_NO_CONFIG="1",
        UV_OFFLINE="1",
        UV_NO_INDEX="1",
        UV_PYTHON_DOWNLOADS="never",
    )
    env.update(extra)
    return env


def write_lock(project_root: Path, wheels: list[Path],
               several: tuple[tuple[str, str, list[Path]], ...] = ()) -> tuple[Path, Platform]:
    """Point the platform's inputs at ``wheels`` and write its lock (header as `nox -s lock` writes it); each of
    ``several`` (name, version, files) is pinned by every file's hash, as a real lock lists a pin's wheels and sdist."""
    project = load_project(project_root)
    plat = resolve_platform(project)
    specs = sorted((*wheel_spec(w), sha256_file(w)) for w in wheels)
    names = sorted([name for name, _, _ in specs] + [name for name, _, _ in several])
    for rel in project.requirements:
        (project_root / rel).write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
    (project_root / plat.variant.torch_layer).write_text("# the tiny lock has no torch layer\n", encoding="utf-8")
    inputs = lock_inputs.compute_inputs(project, plat, "pip-tools")
    pinned = {name: f"{name}=={version} \\\n    --hash=sha256:{digest}\n" for name, version, digest in specs}
    pinned.update({name: f"{name}=={version}" + "".join(f" \\\n    --hash=sha256:{sha256_file(f)}" for f in files)
                   + "\n" for name, version, files in several})
    body = "".join(pinned[name] for name in sorted(pinned))
    header = [
        ("kernodeck-lock-version", lockfile.FORMAT_VERSION),
        ("platform", plat.id),
        ("python", plat.python),
        ("variant", plat.variant.name),
        ("resolver", f"pip-tools {lock_inputs.resolver_version(project, 'pip-tools')}"),
        ("command", "written by tests/helpers/tinylock.py"),
        ("packages", str(len(pinned))),
        *[("input", f"{k} {v}") for k, v in inputs.entries],
        ("inputs-digest", inputs.digest()),
    ]
    path = lock_inputs.lock_path(project, plat)
    text = lockfile.render(header, body)
    # the lock and its PEP 751 twin, the files placed from the wheels' own folder (no index)
    links = sorted({str(w.parent) for w in [*wheels, *(f for _, _, files in several for f in files)]})
    write_pair(project, plat, text, [Source("find-links", folder) for folder in links], True)
    assert check.check_lock(project, plat) == [], "the tiny lock must be current against its inputs"
    return path, plat


def locked_tiny_project(root: Path, wheels: list[Path],
                        several: tuple[tuple[str, str, list[Path]], ...] = ()) -> tuple[Path, Platform]:
    """A copy of the project whose lock for this machine pins exactly ``wheels`` (and ``several``: write_lock)."""
    project = copy_project(root)
    _, plat = write_lock(project, wheels, several)
    return project, plat


def env_wheels(links: Path) -> list[Path]:
    """The wheels of a tiny env, written into ``links``: pip (this Python's ensurepip's), tinya 1.0, tinyb 2.0."""
    return [pip_wheel(links), write_wheel(links, "tinya", "1.0"), write_wheel(links, "tinyb", "2.0")]


def built_tiny(root: Path, links: Path, wheels: list[Path],
               uv_cache: Path) -> tuple[Path, Platform, dict[str, str]]:
    """A tiny project in ``root`` locking ``wheels``, rebuilt once (uv, offline, ``links`` its only source, ``uv_cache``
    its cache: a module's tests may share one, content-addressed, its envs' files copies of it, never links):
    (project, platform, the installers' environment)."""
    project, plat = locked_tiny_project(root / "project", wheels)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(uv_cache))
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return project, plat, env


def current_env(project: Path, plat: Platform) -> Path:
    return (project / ".venv-rebuild" / plat.id / "current").resolve()


def offline_tiny_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's sources for a test: the tiny wheels only (alpha 1.0 needs beta>=1; beta 1.0 and 2.0)."""
    wheels = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, wheels, tmp_path / "cache")
    return wheels


def lock_current(root: Path) -> list[str]:
    """The lock check's answer for the project at ``root`` ([]: current)."""
    proj = load_project(root)
    return check.check_lock(proj, resolve_platform(proj))


def lock_then_check(root: Path, resolver: str) -> tuple[Path, list[str]]:
    """A real lock of ``root`` with ``resolver``, and the lock check's answer right after it."""
    from kernodeck.lock import compile as lock_compile

    proj = load_project(root)
    plat = resolve_platform(proj)
    target = lock_compile.compile_lock(proj, plat, resolver=resolver)
    return target, check.check_lock(proj, plat)


# An in-tree PEP 517 backend: a wheel of the sdist's ``<name>/__init__.py`` (no build requirement: it builds offline).
SDIST_BACKEND = '''
import base64, hashlib, os, zipfile

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    meta = dict(line.split(": ", 1) for line in open("PKG-INFO").read().splitlines() if ": " in line)
    name, version = meta["Name"], meta["Version"]
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": open(f"{name}/__init__.py", "rb").read(),
             f"{info}/METADATA": f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: tiny-backend\\nRoot-Is-Purelib: true\\n"
                              b"Tag: py3-none-any\\n"}
    digest = lambda data: base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = [f"{path},sha256={digest(data)},{len(data)}" for path, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\\n".join(record) + "\\n").encode()
    target = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, target), "w") as archive:
        for path, data in files.items():
            archive.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return target
'''


def write_sdist(folder: Path, name: str, version: str, module: str, *, backend: str = "") -> Path:
    """``name``-``version``.tar.gz, byte-reproducible, whose ``<name>/__init__.py`` is ``module``: built by an in-tree
    backend (it builds offline, needing nothing from an index) making a pure wheel of that module, or, given
    ``backend``, by that build requirement's module of the same name (fetched by the installer from its sources)."""
    build = (f'[build-system]\nrequires = ["{backend}"]\nbuild-backend = "{backend}"\n' if backend else
             '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
    members = {"PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
               "pyproject.toml": build.encode(), **({} if backend else {"backend.py": SDIST_BACKEND.encode()}),
               f"{name}/__init__.py": module.encode()}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for path, data in members.items():
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size, info.mtime, info.mode = len(data), 1577836800, 0o644
            archive.addfile(info, io.BytesIO(data))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}-{version}.tar.gz"
    target.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return target
