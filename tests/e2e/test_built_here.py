"""A lock pin installed from its sdist (issue 33, item 5), on a tiny hermetic lock (no index, no torch): the rebuild
builds it here and discovery names it with its build backend and digests; a platform declaring ``only-binary``
refuses to build it (pip ``--only-binary :all:``, uv ``--no-build``)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
import tomlkit

from kernodeck._fs import sha256_file
from kernodeck.env import extension_scan
from kernodeck.lock import check, lockfile, write
from kernodeck.lock import inputs as lock_inputs
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.sources import Source
from tests.helpers.project import copy_project, kd
from tests.helpers.tinylock import current_env, offline_env, pip_wheel

# An in-tree PEP 517 backend: the build needs nothing from an index (the test has none).
BACKEND = """
import base64, hashlib, zipfile

FILES = {"kdsrc/__init__.py": b"VALUE = 1\\n",
         "kdsrc-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: kdsrc\\nVersion: 1.0\\n",
         "kdsrc-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\\nGenerator: kdsrc-backend (1.0)\\n"
                                      b"Root-Is-Purelib: true\\nTag: py3-none-any\\n"}


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "kdsrc-1.0-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(f"{wheel_directory}/{name}", "w") as archive:
        for path, data in FILES.items():
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        archive.writestr("kdsrc-1.0.dist-info/RECORD", "\\n".join([*record, "kdsrc-1.0.dist-info/RECORD,,"]) + "\\n")
    return name
"""
SDIST_FILES = {
    "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
    "backend.py": BACKEND,
    "PKG-INFO": "Metadata-Version: 2.1\nName: kdsrc\nVersion: 1.0\n",
}


def _sdist(folder: Path) -> Path:
    """kdsrc-1.0.tar.gz, byte-reproducible: a setuptools project with one module."""
    path = folder / "kdsrc-1.0.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for name, text in SDIST_FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(f"kdsrc-1.0/{name}")
            info.size, info.mtime, info.mode = len(data), 1577836800, 0o644
            archive.addfile(info, io.BytesIO(data))
    import gzip

    path.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return path


def _project(tmp_path: Path, only_binary: bool, declared: bool = True) -> tuple[Path, Path]:
    """A copy of the project locking pip (a wheel) and kdsrc (an sdist only, its backend in its tree); the platform
    declares ``only-binary`` or not; the project declares kdsrc ``built-here`` (``declared``) or not."""
    links = tmp_path / "links"
    pip = pip_wheel(links)
    sdist = _sdist(links)
    root = copy_project(tmp_path / "project")
    project = load_project(root)
    plat = resolve_platform(project)
    doc = tomlkit.parse((root / "pyproject.toml").read_text(encoding="utf-8"))
    for entry in doc["tool"]["kernodeck"]["platforms"]:  # type: ignore[index, union-attr]
        if f"cp{entry['python'].replace('.', '')}-{entry['os-arch']}-{entry['variant']}" == plat.id:
            entry["only-binary"] = only_binary
    if declared:
        doc["tool"]["kernodeck"]["built-here"] = ["kdsrc"]  # type: ignore[index]
    (root / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    project = load_project(root)
    specs = [("kdsrc", "1.0", sha256_file(sdist)), ("pip", pip.name.split("-")[1], sha256_file(pip))]
    for rel in project.requirements:
        (root / rel).write_text("kdsrc\npip\n", encoding="utf-8")
    (root / plat.variant.torch_layer).write_text("# no torch layer\n", encoding="utf-8")
    inputs = lock_inputs.compute_inputs(project, plat, "pip-tools")
    header = [("kernodeck-lock-version", lockfile.FORMAT_VERSION), ("platform", plat.id), ("python", plat.python),
              ("variant", plat.variant.name),
              ("resolver", f"pip-tools {lock_inputs.resolver_version(project, 'pip-tools')}"),
              ("command", "written by tests/e2e/test_built_here.py"), ("packages", "2"),
              *[("input", f"{k} {v}") for k, v in inputs.entries], ("inputs-digest", inputs.digest())]
    body = "".join(f"{n}=={v} \\\n    --hash=sha256:{d}\n" for n, v, d in specs)
    write.write_pair(project, plat, lockfile.render(header, body), [Source("find-links", str(links))], True)
    assert check.check_lock(project, plat) == []
    return root, links


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_pin_built_from_its_sdist_is_named_and_only_binary_refuses_it(tmp_path: Path, installer: str) -> None:
    root, links = _project(tmp_path / "built", only_binary=False)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    proc = kd(root, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    project = load_project(root)
    plat = resolve_platform(project)
    found = extension_scan.discover(current_env(root, plat), cuobjdump="", twin=check.read_lock(project, plat).twin)
    (made,) = found.built_here  # pip came as a wheel: not built here
    assert (made.name, made.version, made.sdist) == ("kdsrc", "1.0", "kdsrc-1.0.tar.gz")
    assert made.sdist_sha256 == hashlib.sha256((links / "kdsrc-1.0.tar.gz").read_bytes()).hexdigest()
    assert made.generator == "kdsrc-backend (1.0)" and made.tags == ("py3-none-any",) and made.record_sha256

    # undeclared: the same build is refused, naming the pin and the declaration (its build requirements are the
    # sources', unpinned: BUILDREQ1), nothing promoted
    root, links = _project(tmp_path / "undeclared", only_binary=False, declared=False)
    proc = kd(root, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 2 and "built from its sdist only when declared" in proc.stderr, proc.stderr[-3000:]
    assert "built-here = ['kdsrc']" in proc.stderr and not list((root / ".venv-rebuild").glob("*/current"))

    # the platform declares only-binary: the same lock is refused, nothing is built here
    root, links = _project(tmp_path / "binary", only_binary=True)
    proc = kd(root, "rebuild", "--installer", installer, env=env)
    assert proc.returncode != 0
    flag = "--no-build" if installer == "uv" else "--only-binary :all:"
    assert flag in proc.stderr and "kdsrc" in proc.stderr, proc.stderr[-3000:]
