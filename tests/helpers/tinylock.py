"""Tiny hermetic locks for installer and wheelhouse tests: wheels built here, a real-format lock, no index anywhere.

A copy of the project gets its platform's inputs replaced by a few tiny packages (and pip itself, from the wheel
that ships with ``ensurepip``), and a lock pinning them with their sha256, written with the same header
``nox -s lock`` writes, so that the drift check passes and ``rebuild`` takes it as it takes a real lock.
"""

from __future__ import annotations

import base64
import ensurepip
import hashlib
import os
import shutil
import zipfile
from pathlib import Path

from kernodeck._fs import sha256_file
from kernodeck.lock import check, lockfile
from kernodeck.lock import inputs as lock_inputs
from kernodeck.lock.write import write_pair
from kernodeck.project.config import load_project
from kernodeck.project.platforms import Platform, resolve_platform
from kernodeck.sources import Source
from tests.helpers.project import copy_project

_EPOCH = (2020, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, *, payload: str = "") -> Path:
    """A valid pure-Python wheel ``name-version-py3-none-any.whl`` (byte-for-byte reproducible)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    members = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n{payload}",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: kernodeck-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},{_record_hash(text.encode())},{len(text.encode())}\n" for path, text in members.items())
    members[f"{dist}/RECORD"] = record + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, text in members.items():
            archive.writestr(zipfile.ZipInfo(member, _EPOCH), text)
    return path


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


def write_lock(project_root: Path, wheels: list[Path]) -> tuple[Path, Platform]:
    """Point the platform's inputs at ``wheels`` and write its lock (header as `nox -s lock` writes it)."""
    project = load_project(project_root)
    plat = resolve_platform(project)
    specs = sorted((*wheel_spec(w), sha256_file(w)) for w in wheels)
    for rel in project.requirements:
        (project_root / rel).write_text("".join(f"{name}\n" for name, _, _ in specs), encoding="utf-8")
    (project_root / plat.variant.torch_layer).write_text("# the tiny lock has no torch layer\n", encoding="utf-8")
    inputs = lock_inputs.compute_inputs(project, plat, "pip-tools")
    body = "".join(f"{name}=={version} \\\n    --hash=sha256:{digest}\n" for name, version, digest in specs)
    header = [
        ("kernodeck-lock-version", lockfile.FORMAT_VERSION),
        ("platform", plat.id),
        ("python", plat.python),
        ("variant", plat.variant.name),
        ("resolver", f"pip-tools {lock_inputs.resolver_version(project, 'pip-tools')}"),
        ("command", "written by tests/helpers/tinylock.py"),
        ("packages", str(len(specs))),
        *[("input", f"{k} {v}") for k, v in inputs.entries],
        ("inputs-digest", inputs.digest()),
    ]
    path = lock_inputs.lock_path(project, plat)
    text = lockfile.render(header, body)
    # the lock and its PEP 751 twin, the files placed from the wheels' own folder (no index)
    links = sorted({str(w.parent) for w in wheels})
    write_pair(project, plat, text, [Source("find-links", folder) for folder in links], True)
    assert check.check_lock(project, plat) == [], "the tiny lock must be current against its inputs"
    return path, plat


def tiny_project(root: Path, wheels: list[Path]) -> tuple[Path, Platform]:
    """A copy of the project whose lock for this machine pins exactly ``wheels``."""
    project = copy_project(root)
    _, plat = write_lock(project, wheels)
    return project, plat


def current_env(project: Path, plat: Platform) -> Path:
    return (project / ".venv-rebuild" / plat.id / "current").resolve()
