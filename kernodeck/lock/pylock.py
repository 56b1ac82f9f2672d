"""PEP 751 locks: ``lockfiles/pylock.<platform-id>.toml`` beside each requirements lock, same pins, same hashes.

The requirements lock says *what* (name, version, sha256); the pylock adds *where* each file lives, which PEP 751
requires: :mod:`kernodeck.lock.place` finds a public URL for every locked file, reading indexes through
:mod:`kernodeck.lock.index_client`; the machine's sources stay out of every written file.

Every pylock is read by the standard parser, :mod:`packaging.pylock` (:func:`read`, which validates it against the
PEP), and written by a TOML writer (:func:`dumps`, tomlkit) from a :class:`packaging.pylock.Pylock`; docs/pep751.md
says why the file list still comes from Kernodeck's own index client rather than ``uv pip compile``.
"""

from __future__ import annotations

import datetime as _dt
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.pylock import Package, PackageSdist, PackageWheel, Pylock, PylockValidationError
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from kernodeck import __version__
from kernodeck._fs import sha256_text
from kernodeck._proc import log
from kernodeck.errors import LockFailed
from kernodeck.lock import lockfile, twin
from kernodeck.lock.index_client import DistFile, Fetcher
from kernodeck.lock.place import locate
from kernodeck.project.platforms import UV_PLATFORM_ENV, Platform
from kernodeck.sources import PYPI, Source, strip_credentials

# tomlkit is imported where used: every lock check reads a twin's digest, and it costs more than the check.

LOCK_VERSION = "1.0"

# platform.system()/sys.platform and platform.machine() of each OS/arch we name, for the `environments` marker.
_MARKERS = {
    "linux_x86_64": ("linux", "x86_64"),
    "linux_aarch64": ("linux", "aarch64"),
    "macosx_arm64": ("darwin", "arm64"),
    "macosx_x86_64": ("darwin", "x86_64"),
    "win_amd64": ("win32", "AMD64"),
}


def environment_marker(plat: Platform) -> str:
    """The PEP 508 marker that selects ``plat`` (the pylock's ``environments`` entry)."""
    if plat.os_arch not in _MARKERS:
        raise LockFailed(f"no environment marker known for {plat.os_arch}; known: {', '.join(_MARKERS)}")
    system, machine = _MARKERS[plat.os_arch]
    return (f'python_version == "{plat.python}" and platform_python_implementation == "CPython" '
            f'and sys_platform == "{system}" and platform_machine == "{machine}"')


def render(lock: lockfile.Lockfile, plat: Platform, files: dict[str, list[DistFile]], lock_text: str) -> str:
    """The pylock text: a :class:`packaging.pylock.Pylock` (validated by packaging) written by :func:`dumps`.

    Packages and files are sorted, so that diffs stay small and the same lock always gives the same bytes. The text
    is read back by :func:`read` and must hold the data it was made from.
    """
    packages = []
    for pin in sorted(lock.pins, key=lambda p: p.name):
        pin_files = files[pin.name]
        hosts = {f.url.split("/", 3)[2] for f in pin_files}
        index = None
        if all(f.url.startswith("https://files.pythonhosted.org/") for f in pin_files):
            index = PYPI
        elif len(hosts) == 1 and plat.variant.index.rstrip("/") != PYPI:
            index = strip_credentials(plat.variant.index.rstrip("/"))
        sdists = [f for f in pin_files if not f.is_wheel]
        wheels = [PackageWheel(**_file_fields(f)) for f in pin_files if f.is_wheel]
        packages.append(Package(
            name=canonicalize_name(pin.name), version=Version(pin.version),
            marker=Marker(pin.marker) if pin.marker else None, index=index,
            sdist=PackageSdist(**_file_fields(sdists[0])) if sdists else None, wheels=wheels or None,
        ))
    tool: dict[str, Any] = {
        "platform": plat.id,
        "requirements-lock": plat.lock_name,
        "requirements-lock-sha256": sha256_text(lock_text),
        "version": __version__,
    }
    target = UV_PLATFORM_ENV.get(plat.os_arch, {}).get("MACOSX_DEPLOYMENT_TARGET")
    if target:
        # uv targets macOS 13.0 unless told otherwise (MACOSX_DEPLOYMENT_TARGET), and the macOS 14 wheels this lock
        # holds (torch's arm64 wheels) are then refused: the lock says which macOS it was made for.
        tool["macos-deployment-target"] = target
    made = Pylock(
        lock_version=Version(LOCK_VERSION), environments=[Marker(environment_marker(plat))],
        requires_python=SpecifierSet(f"=={plat.python}.*"), created_by="kernodeck", packages=packages,
        tool={"kernodeck": tool},
    )
    data = made.to_dict()  # asdict deep-copies ~5000 values: once (a third of a second)
    try:
        Pylock.from_dict(data)  # what made.validate() does, without a second to_dict()
    except PylockValidationError as exc:
        raise LockFailed(f"the PEP 751 lock for {plat.id} is not valid ({exc}); not writing it") from None
    text = dumps(data, f"PEP 751 lock for {plat.id}, written by Kernodeck beside {plat.lock_name} (same pins, same "
                       "hashes); do not edit by hand.")
    if strip_credentials(text) != text:
        raise LockFailed(f"the PEP 751 lock for {plat.id} would hold a URL credential; not writing it")
    if tomllib.loads(text) != data:
        raise LockFailed(f"the PEP 751 lock for {plat.id} does not read back as written; not writing it")
    return text


def _file_fields(entry: DistFile) -> dict[str, Any]:
    return {
        "name": entry.filename, "url": strip_credentials(entry.url), "size": entry.size or None,
        "upload_time": entry.upload_time.astimezone(_dt.UTC) if entry.upload_time is not None else None,
        "hashes": {"sha256": entry.sha256},
    }


# The order of a file's keys in the tables Kernodeck writes (the PEP's data model puts upload-time before url; the
# committed locks were written in this order and stay byte-identical).
_FILE_KEYS = ("name", "url", "path", "upload-time", "size", "hashes")


def _inline(table: dict[str, Any]) -> Any:
    import tomlkit

    inline = tomlkit.inline_table()
    for key in sorted(table, key=lambda k: _FILE_KEYS.index(k) if k in _FILE_KEYS else len(_FILE_KEYS)):
        value = table[key]
        inline.append(key, _inline(value) if isinstance(value, dict) else value)
    return inline


def dumps(lock: Pylock | Mapping[str, Any], header: str) -> str:
    """The TOML text of a pylock (or of its ``to_dict()``), written by tomlkit: top-level keys, one ``[[packages]]``
    table each, a file as an inline table (the wheels one per line), then ``[tool.*]``. Deterministic: the same data
    gives the same bytes."""
    import tomlkit

    data = dict(lock.to_dict() if isinstance(lock, Pylock) else lock)
    doc = tomlkit.document()
    doc.add(tomlkit.comment(header))
    for key, value in data.items():
        if key not in ("packages", "tool"):
            doc.add(key, value)
    packages = tomlkit.aot()
    for package in data["packages"]:
        table = tomlkit.table()
        for key, value in package.items():
            if key == "sdist":
                table.add(key, _inline(value))
            elif key == "wheels":
                wheels = tomlkit.array()
                wheels.extend(_inline(w) for w in value)
                table.add(key, wheels.multiline(True))
            else:
                table.add(key, value)
        packages.append(table)
    doc.add(tomlkit.nl())
    doc.add("packages", packages)
    if data.get("tool"):
        tool = tomlkit.table(is_super_table=True)
        for name, section in data["tool"].items():
            tool.add(name, section)
        doc.add("tool", tool)
    return tomlkit.dumps(doc)


def build(lock_text: str, path: Path, plat: Platform, machine: list[Source], *, no_index: bool,
          fetcher: Fetcher | None = None, known: dict[str, DistFile] | None = None) -> str:
    """The pylock text for a requirements lock's text (not yet written)."""
    lock = lockfile.parse_text(lock_text, path)
    files = locate(lock.pins, plat, machine, no_index=no_index, fetcher=fetcher, known=known)
    text = render(lock, plat, files, lock_text)
    log(f"kernodeck: PEP 751 lock for {plat.id}: {len(lock.pins)} packages, "
        f"{sum(len(v) for v in files.values())} files")
    return text


def disagreements(pylock_path: Path, lock: lockfile.Lockfile, limit: int = 5) -> list[str]:
    """Where the PEP 751 twin and the requirements lock disagree: a package only in one, another version, other
    hashes. Empty when they hold the same pins and hashes."""
    return twin.disagreements(pylock_path, lock.hashed(), lock.path.name, limit)
