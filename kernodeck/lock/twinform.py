"""What Kernodeck's writer puts in the PEP 751 twin of a requirements lock, as data (before any TOML layout), and
where a twin read from disk departs from it.

One model for both sides: :func:`expected` is what :func:`kernodeck.lock.pylock.render` writes, and the lock check
holds a committed twin to it, so that the twin is checked as an installer reads it (every key: a ``marker``, the
``environments``, ``requires-python``, a package listed twice), not only by its names, versions and hashes. The
check takes each file's URL, size and upload time from the twin itself (where the writer would ask an index), and
imports neither tomlkit nor the network.
"""

from __future__ import annotations

import datetime as _dt
import posixpath
from collections import Counter
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.markers import Marker
from packaging.pylock import Package, PackageSdist, PackageWheel, Pylock
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from kernodeck import __version__
from kernodeck._fs import sha256_text
from kernodeck.errors import LockFailed
from kernodeck.lock import lockfile, twin
from kernodeck.lock.index_client import DistFile
from kernodeck.project.platforms import UV_PLATFORM_ENV, Platform
from kernodeck.sources import PYPI, strip_credentials

LOCK_VERSION = "1.0"
# The requirements lock's header line that names a file the index serves at a URL naming no file (a PEP 691 index's
# content-addressed ``/api/files/<sha256>``), sealed with the pins. The twin's name of such a file is held to it: the
# lock, not the twin, binds the name (its wheel tags, what an installer selects by) to the bytes.
FILE_NAME = lockfile.FILE_NAME

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


def expected(lock: lockfile.Lockfile, plat: Platform, files: Mapping[str, list[DistFile]], lock_text: str, *,
             version: str = __version__) -> Mapping[str, Any]:
    """The twin's data as the writer makes it (``Pylock.to_dict()``): packages and files sorted, so that the same
    lock always gives the same data. ``files``: each pin's files; ``version``: the Kernodeck that wrote it."""
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
        "version": version,
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
    return made.to_dict()  # asdict deep-copies every value: once


def _file_fields(entry: DistFile) -> dict[str, Any]:
    return {
        "name": entry.filename, "url": strip_credentials(entry.url), "size": entry.size or None,
        "upload_time": entry.upload_time.astimezone(_dt.UTC) if entry.upload_time is not None else None,
        "hashes": {"sha256": entry.sha256},
    }


def file_names(files: Mapping[str, list[DistFile]]) -> list[str]:
    """The lock's :data:`FILE_NAME` lines for ``files``: one per file at a URL that names no distribution file (none
    for PyPI's or the PyTorch index's files), sorted."""
    return sorted(f"{f.sha256} {f.filename}" for pin_files in files.values() for f in pin_files
                  if url_file_name(f.url) != f.filename and not _names_a_file(url_file_name(f.url)))


def recorded_names(lock: lockfile.Lockfile) -> dict[str, str]:
    """The file names the lock's header binds to sha256 digests (:data:`FILE_NAME`)."""
    names = {}
    for line in lock.header.get(FILE_NAME, []):
        digest, _, name = line.partition(" ")
        if name:
            names[digest] = name
    return names


def reusable(known: Mapping[str, DistFile], lock: lockfile.Lockfile | None) -> dict[str, DistFile]:
    """Of the files an existing twin places (twin.known_files: its names as it says them), those a relock or a
    rewrite may take again unasked: each whose name is its URL's, or, at a URL that names no file, the name ``lock``
    records for its sha256. Any other is asked of the index again, so that a twin's name is never laundered into the
    lock's record through the TIP that rewrites it (red-team pass 39, TWIN4)."""
    names = recorded_names(lock) if lock is not None else {}
    kept = {}
    for digest, entry in known.items():
        at = url_file_name(entry.url)
        if at == entry.filename or (not _names_a_file(at) and names.get(digest) == entry.filename):
            kept[digest] = entry
    return kept


def url_file_name(url: str) -> str:
    """The file a URL names: its path's last segment, percent-decoded (``torch-2.13.0%2Bcpu-…`` names
    ``torch-2.13.0+cpu-…``)."""
    return unquote(posixpath.basename(urlsplit(url).path))


def _names_a_file(segment: str) -> bool:
    """Whether a URL's last segment is a distribution file's name (a wheel's or an sdist's), not the last segment of a
    content-addressed or download URL."""
    try:
        if segment.endswith(".whl"):
            parse_wheel_filename(segment)
        else:
            parse_sdist_filename(segment)
    except (InvalidWheelFilename, InvalidSdistFilename):
        return False
    return True


def departures(raw: Mapping[str, Any], data: Pylock, lock: lockfile.Lockfile, plat: Platform, lock_text: str,
               twin_name: str, limit: int = 5) -> list[str]:
    """Where a twin (``raw``: its TOML as read; ``data``: the same validated) departs from what the writer makes for
    ``lock`` on ``plat``, its files placed at the twin's own URLs. Empty when an installer reads exactly that."""
    placed = {}
    misnamed: list[str] = []
    bound = recorded_names(lock)
    for package in data.packages:
        for entry in twin.package_files(package):
            digest = entry.hashes.get("sha256")
            if digest and entry.url and entry.name:
                # a URL that names a distribution file names this one, as the writer takes both from the index
                # (another file's bytes under this name: red-team pass 37, TWIN2); a URL that names none (a
                # content-addressed or download endpoint of a PEP 691 index: pass 38, TWIN3) leaves the name to the
                # index's word, which the writer records in the lock (FILE_NAME), bound to the file's sha256: the
                # twin's name is held to it (another wheel's bytes under this name: pass 39, TWIN4)
                at = url_file_name(entry.url)
                named = at if at == entry.name or _names_a_file(at) else bound.get(digest)  # parsed only if differ
                if named is None:
                    misnamed.append(f"{package.name}: the file {entry.name} in {twin_name} is at {entry.url}, which "
                                    f"names no file, and {lock.path.name} records no name for its sha256 "
                                    f"{digest[:12]}… (the writer records it: # {FILE_NAME})")
                    named = entry.name
                elif named != entry.name:
                    misnamed.append(f"{package.name}: the file {entry.name} in {twin_name} is at {entry.url}, whose "
                                    f"file is {named} (a file's name must be its URL's, or the one "
                                    f"{lock.path.name} records for its sha256)")
                placed[digest] = DistFile(named, entry.url, digest, entry.size, entry.upload_time)
    files = {pin.name: sorted((placed[h] for h in set(pin.hashes) if h in placed), key=lambda f: f.filename)
             for pin in lock.pins}
    recorded = (data.tool or {}).get("kernodeck", {}).get("version")
    want = expected(lock, plat, files, lock_text, version=recorded if isinstance(recorded, str) else __version__)
    if dict(raw) == want and not misnamed:
        return []
    found = misnamed + [f"{key}: {_shown(raw.get(key))} in {twin_name}, {_shown(want.get(key))} as Kernodeck writes it"
             for key in sorted(set(raw) | set(want)) if key != "packages" and raw.get(key) != want.get(key)]
    mine = {p["name"]: p for p in want["packages"]}
    listed = Counter(str(p.get("name")) for p in raw.get("packages", []) if isinstance(p, Mapping))
    for name in sorted(set(listed) | set(mine)):
        if listed[name] > 1:
            found.append(f"{name} is listed {listed[name]} times in {twin_name} (an installer takes the entry its "
                         "markers select; Kernodeck writes each package once)")
        elif name not in mine or not listed[name]:
            found.append(f"{name} is {'only' if name in listed else 'not'} in {twin_name}, of the packages "
                         "Kernodeck writes for this lock")
        else:
            (theirs,) = [p for p in raw["packages"] if isinstance(p, Mapping) and str(p.get("name")) == name]
            found += [f"{name}: {_difference(key, theirs.get(key), mine[name].get(key), twin_name)}"
                      for key in sorted(set(theirs) | set(mine[name])) if theirs.get(key) != mine[name].get(key)]
    if not found:  # same entries, another order
        found.append(f"{twin_name} holds its packages in another order than Kernodeck writes them")
    return found[:limit] + ([f"… and {len(found) - limit} more"] if len(found) > limit else [])


def _difference(key: str, theirs: object, mine: object, twin_name: str) -> str:
    """One key of a package that departs: its value in the twin and as written; a file list by its first file."""
    if key in ("wheels", "sdist"):
        theirs_files = theirs if isinstance(theirs, list) else [theirs] if theirs else []
        mine_files = mine if isinstance(mine, list) else [mine] if mine else []
        for index in range(max(len(theirs_files), len(mine_files))):
            one = theirs_files[index] if index < len(theirs_files) else None
            other = mine_files[index] if index < len(mine_files) else None
            if one != other:
                return (f"{key}: {_shown(one)} in {twin_name} where Kernodeck writes {_shown(other)}"
                        if not (isinstance(one, Mapping) and isinstance(other, Mapping)
                                and one.get("name") == other.get("name"))
                        else f"{key}: {one.get('name')} differs in "
                             + ", ".join(k for k in sorted(set(one) | set(other)) if one.get(k) != other.get(k)))
    return f"{key} {_shown(theirs)} in {twin_name}, {_shown(mine)} as Kernodeck writes it"


def _shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, Mapping) and "hashes" in value:  # a file: by its name
        return str(value.get("name", "?"))
    return repr(value)
