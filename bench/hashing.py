"""The weights fingerprint against ``sha256sum`` over the same files (issue 31: weights run to many gigabytes).

A synthetic Hugging Face-like snapshot (a few large shards and small JSON files, random bytes, ``--hash-mb`` in all)
in a temporary folder: Kernodeck's fingerprint of a weights folder (``kernodeck.inenv.locate.fingerprint`` with
``remember``: what ``reference`` and ``verify`` run on an ``hf``, ``url`` or ``path`` source; the files hashed in
parallel threads) with no stat record yet, against one ``sha256sum`` process over the same files, in interleaved pairs
(page cache warm on both sides after the warm-up); then the check of the unchanged snapshot (the stat record reused:
no file read). Targets: the first fingerprint within 1.3x of ``sha256sum``, the unchanged check within 0.2 s.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.timing import Side, _run, pair
from kernodeck._proc import log

SHARDS = 4  # the large files share the size; a snapshot's configuration and tokenizer files beside them
SMALL = {"config.json": 700, "tokenizer.json": 466_000, "tokenizer_config.json": 1_200, "README.md": 9_000}
CHUNK = 1 << 24

# The Kernodeck side, one process: the fingerprint of a folder with KERNODECK_CACHE's stat record as it finds it.
FINGERPRINT = """
import json, sys, time
from pathlib import Path
from kernodeck.inenv.locate import fingerprint
start = time.perf_counter()
found = fingerprint(Path(sys.argv[1]), remember=True)
print(json.dumps({"seconds": time.perf_counter() - start, "files": len(found)}))
"""


def make_snapshot(folder: Path, total_mb: int) -> dict[str, Any]:
    """``SHARDS`` shards of random bytes plus the small files, ``total_mb`` MiB in all; what was made."""
    folder.mkdir(parents=True, exist_ok=True)
    shard = (total_mb << 20) // SHARDS
    for number in range(1, SHARDS + 1):
        with (folder / f"model-{number:05d}-of-{SHARDS:05d}.safetensors").open("wb") as out:
            left = shard
            while left:
                out.write(os.urandom(min(CHUNK, left)))
                left -= min(CHUNK, left)
    for name, size in SMALL.items():
        (folder / name).write_bytes(os.urandom(size))
    files = sorted(p for p in folder.iterdir() if p.is_file())
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def hashing_row(total_mb: int, repeat: int, env: dict[str, str]) -> dict[str, Any]:
    """The first fingerprint against sha256sum (pairs), then the unchanged snapshot's check (its own seconds)."""
    sha256sum = shutil.which("sha256sum")
    if sha256sum is None:
        from bench.timing import BenchError

        raise BenchError("sha256sum is not on PATH: the hashing row compares the fingerprint with it")
    with tempfile.TemporaryDirectory(prefix="kernodeck-bench-hash-") as tmp:
        root = Path(tmp)
        snapshot, cache = root / "snapshot", root / "cache"
        log(f"bench: a {total_mb} MiB synthetic snapshot in {snapshot} (untimed)")
        made = make_snapshot(snapshot, total_mb)
        files = sorted(p for p in snapshot.iterdir() if p.is_file())
        ours_env = {**env, "KERNODECK_CACHE": str(cache), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        argv: list[str | Path] = [sys.executable, "-c", FINGERPRINT, snapshot]
        first = Side("Kernodeck's fingerprint, no stat record", [argv], ours_env,
                     before=lambda: shutil.rmtree(cache, ignore_errors=True),
                     note="locate.fingerprint(folder, remember=True): parallel threads, then the stat record")
        bare = Side("sha256sum over the same files", [[sha256sum, *files]], env, note="one process, file after file")
        row = pair(first, bare, cwd=root, repeat=repeat)
        # the record is there now (the last Kernodeck run wrote it): an unchanged snapshot's check reads no file
        checks = [json.loads(_run(argv, cwd=root, env=ours_env).stdout)["seconds"] for _ in range(repeat)]
    row["snapshot"] = {**made, "mib": total_mb, "threads": min(8, os.cpu_count() or 1)}
    row["measured"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    row["unchanged_s"] = {"times_s": [round(t, 4) for t in checks], "median_s": round(statistics.median(checks), 4)}
    return row
