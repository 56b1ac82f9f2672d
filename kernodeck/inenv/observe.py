"""What an environment really holds, observed by its OWN interpreter: ``<env>/bin/python -I observe.py``.

Runs inside the env and imports nothing from Kernodeck (only the standard library). Prints one JSON object:
every distribution on the interpreter's path (name, version, direct URL / editable from ``direct_url.json``, where it
lives) and, for each, the files its ``RECORD`` lists that are missing or have another size than recorded. With
``--hashes`` every file's content is also hashed against its RECORD digest (about 40x slower: measured in README).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as metadata
import json
import os
import sys
import time


def _direct_url(dist: metadata.Distribution) -> dict[str, object] | None:
    raw = dist.read_text("direct_url.json")
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return {"url": "(unreadable direct_url.json)", "editable": False}
    url = str(data.get("url", ""))
    vcs = data.get("vcs_info") or {}
    if vcs.get("commit_id"):
        url = f"{vcs.get('vcs', 'git')}+{url}@{vcs['commit_id']}"
    return {"url": url, "editable": bool((data.get("dir_info") or {}).get("editable"))}


def _damage(dist: metadata.Distribution, hashes: bool) -> tuple[list[str], int, int]:
    """Files RECORD lists that are missing, of another size or (with ``hashes``) another digest."""
    record = dist.read_text("RECORD")
    if record is None:
        return [], 0, -1
    base = str(dist.locate_file(""))
    bad, checked, hashed = [], 0, 0
    for row in csv.reader(record.splitlines()):
        if len(row) < 3 or not row[1]:  # RECORD itself and compiled files carry no digest
            continue
        checked += 1
        path = os.path.join(base, row[0])
        try:
            size = os.stat(path).st_size
        except OSError:
            bad.append(f"{row[0]} (missing)")
            continue
        if row[2] and size != int(row[2]):
            bad.append(f"{row[0]} (size {size}, RECORD says {row[2]})")
            continue
        if hashes:
            algo, _, want = row[1].partition("=")
            digest = hashlib.new(algo)
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            hashed += size
            if base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode() != want:
                bad.append(f"{row[0]} (content differs from RECORD)")
    return bad, checked, hashed


def main() -> None:
    hashes = "--hashes" in sys.argv[1:]
    start = time.perf_counter()
    dists, files, hashed = [], 0, 0
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        bad, checked, size = _damage(dist, hashes)
        files += checked
        hashed += max(size, 0)
        dists.append(
            {
                "name": name or f"(no name: {dist.locate_file('')})",
                "version": dist.version if name else "",
                "direct_url": _direct_url(dist),
                "location": str(dist.locate_file("")),
                "record": size >= 0,
                "damaged": bad,
            }
        )
    print(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "distributions": dists,
                "files_checked": files,
                "bytes_hashed": hashed,
                "depth": "size+hash" if hashes else "size",
                "seconds": round(time.perf_counter() - start, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
