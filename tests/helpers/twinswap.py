"""The committed cp311 lock with numpy's cp311 and cp312 wheels' names swapped in its twin (red-team passes 38-40's
twin-name findings): the platform, its two wheels' names, and the lock and twin Kernodeck's writer makes for such a
swap at URLs of a given form."""

from __future__ import annotations

from pathlib import Path

from kernodeck.lock import lockfile, pylock, twin, twinform
from kernodeck.lock.index_client import DistFile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from tests.helpers.project import ROOT

PLATFORM = "cp311-linux_x86_64-cpu"
PLAT = parse_platform_id(load_project(ROOT), PLATFORM)
CP311 = "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
CP312 = CP311.replace("cp311-cp311", "cp312-cp312")

# URLs that name no distribution file by the check's reading (url_file_name, _names_a_file): {sha} the file's sha256,
# {file} the file's own name
NO_FILE_URLS = {
    "content-addressed": "https://pypi.internal.example/api/files/{sha}",
    "download endpoint": "https://pypi.internal.example/download?file={file}",
    "trailing slash": "https://pypi.internal.example/packages/{file}/",
    "params": "https://pypi.internal.example/packages/{file};v=1",
}


def swapped_twin(tmp_path: Path, url_of: str) -> tuple[Path, Path]:
    """The committed lock and the twin Kernodeck's writer (pylock.render) makes for it with numpy's cp311 and cp312
    manylinux wheels' hashes swapped under their names: the entry named CP311 holds the cp312 file's sha256, size and
    URL, and the other way round. ``url_of`` is the URLs' form (one of NO_FILE_URLS, or a form naming the file;
    str.format ignores the field a form leaves out); at a URL naming no file, the lock holds the ``# file-name``
    lines the writer records for the two wheels as the index serves them."""
    lock_path = ROOT / "lockfiles" / f"{PLATFORM}.txt"
    lock = lockfile.read(lock_path)
    known = twin.known_files(ROOT / "lockfiles" / f"pylock.{PLATFORM}.toml")
    a = next(f for f in known.values() if f.filename == CP311)
    b = next(f for f in known.values() if f.filename == CP312)
    served = dict(known)  # as the index serves them: each name with its own bytes
    served[a.sha256] = DistFile(CP311, url_of.format(sha=a.sha256, file=a.filename), a.sha256, a.size, a.upload_time)
    served[b.sha256] = DistFile(CP312, url_of.format(sha=b.sha256, file=b.filename), b.sha256, b.size, b.upload_time)
    known[a.sha256] = DistFile(CP312, url_of.format(sha=a.sha256, file=a.filename), a.sha256, a.size, a.upload_time)
    known[b.sha256] = DistFile(CP311, url_of.format(sha=b.sha256, file=b.filename), b.sha256, b.size, b.upload_time)

    def per_pin(table: dict[str, DistFile]) -> dict[str, list[DistFile]]:
        return {pin.name: sorted((table[h] for h in pin.hashes if h in table), key=lambda f: f.filename)
                for pin in lock.pins}

    target, twin_file = tmp_path / lock_path.name, tmp_path / f"pylock.{PLATFORM}.toml"
    # the lock as the writer left it from the index (the names it serves, recorded), the twin swapped afterwards
    text = lockfile.with_header(lock_path.read_text(encoding="utf-8"), twinform.FILE_NAME,
                                twinform.file_names(per_pin(served)))
    target.write_text(text, encoding="utf-8")
    twin_file.write_text(pylock.render(lockfile.parse_text(text, target), PLAT, per_pin(known), text),
                         encoding="utf-8")
    return target, twin_file
