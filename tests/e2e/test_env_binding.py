"""The env is bound to its lock (kernodeck/env/binding.py): a reused env whose lock body or wheel hashes are no longer
the lock's is refused, on a tiny hermetic lock (wheels built here, no index).

The case tried: one wheel hash removed from the lock (same version), the lock resealed and its twin rewritten with
``lock -- --pylock-only``, then ``verify -- --no-rebuild``; the names and versions the inventory compares are equal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file
from kernodeck.env import binding
from kernodeck.env.envdirs import MARKER
from kernodeck.lock import lockfile
from kernodeck.project.platforms import Platform
from tests.helpers.project import kd
from tests.helpers.reports import read_report, statuses
from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, pip_wheel, write_wheel

FRESH_TIP = "TIP: nox -s rebuild -- --fresh"


def _lock_path(project: Path, plat: Platform) -> Path:
    return project / "lockfiles" / f"{plat.id}.txt"


def _edit_lock(project: Path, plat: Platform, env: dict[str, str], old: str, new: str) -> None:
    """Edit the lock's body, reseal it and rewrite its twin as a user would (``lock -- --pylock-only``)."""
    path = _lock_path(project, plat)
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(lockfile.seal(text.replace(old, new)), encoding="utf-8")
    proc = kd(project, "lock", "--pylock-only", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert kd(project, "lock", "--check", env=env).returncode == 0  # the edited lock passes every check of its own


def _project(tmp_path: Path, installer: str) -> tuple[Path, Platform, dict[str, str], str, str]:
    """A tiny project whose lock pins tinya==1.0 with two hashes: the wheel installed here (py3) and another build of
    the same version (a py2 tag, never chosen); rebuilt with ``installer``. (project, plat, env, installed, other)."""
    links = tmp_path / "links"
    installed = write_wheel(links, "tinya", "1.0")
    other = write_wheel(tmp_path / "other", "tinya", "1.0", payload="OTHER = 1\n")
    other = other.rename(links / "tinya-1.0-py2-none-any.whl")
    pinned = [pip_wheel(links), installed, write_wheel(links, "tinyb", "2.0")]
    project, plat = locked_tiny_project(tmp_path / "project", pinned)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    good, alt = sha256_file(installed), sha256_file(other)
    _edit_lock(project, plat, env, f"--hash=sha256:{good}", f"--hash=sha256:{good} \\\n    --hash=sha256:{alt}")
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return project, plat, env, good, alt


def _marker(project: Path, plat: Platform) -> dict[str, object]:
    data = json.loads((current_env(project, plat) / MARKER).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_hash_removed_from_the_lock_fails_no_rebuild(tmp_path: Path, installer: str) -> None:
    project, plat, env, good, alt = _project(tmp_path, installer)
    wheels = _marker(project, plat)[binding.WHEELS]
    assert isinstance(wheels, dict)
    # what the install verified: pip reports the file it installed; uv, the pin's hashes it checked the wheel against
    assert wheels["tinya"]["sha256"] == ([good] if installer == "pip" else [good, alt])
    # control: the env as built is the lock's (the run goes on past the rebuild and inventory steps)
    control = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "control"), env=env)
    report = read_report(tmp_path / "control")
    assert statuses(report)["rebuild"] == "skipped", control.stderr[-2000:]
    assert statuses(report)["inventory"] == "passed", control.stderr[-2000:]

    _edit_lock(project, plat, env, f"--hash=sha256:{good} \\\n    --hash=sha256:{alt}", f"--hash=sha256:{alt}")
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"), env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "is not the lock's" in errors[0], proc.stderr[-2000:]
    for words in ("another lock body", "tinya==1.0:", "not among the lock's hashes"):
        assert words in errors[0], errors[0]
    assert FRESH_TIP in proc.stderr
    report = read_report(tmp_path / "run")
    assert report["first_failure"] == "rebuild" and statuses(report)["inventory"] == "not-run"


def test_reuse_refuses_an_env_whose_wheel_hash_is_not_the_locks(tmp_path: Path) -> None:
    """The rebuild's reuse: the same lock digest, but the record of the wheel installed is not among the pin's hashes
    (a record edited, or an env made by other means): not reused, built again."""
    project, plat, env, _, _ = _project(tmp_path, "uv")
    before = current_env(project, plat)
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 0 and current_env(project, plat) == before  # control: reused as it is
    marker = _marker(project, plat)
    wheels = marker[binding.WHEELS]
    assert isinstance(wheels, dict)
    wheels["tinya"]["sha256"] = ["0" * 64]
    (before / MARKER).write_text(json.dumps(marker), encoding="utf-8")
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"is not the lock's \(tinya==1\.0: its installed wheel sha256:0{16}… is not among", proc.stderr)
    assert current_env(project, plat) != before


def _lock(tmp_path: Path, body: str) -> lockfile.Lockfile:
    path = tmp_path / "x.txt"
    path.write_text(lockfile.render([("platform", "x")], body), encoding="utf-8")
    return lockfile.read(path, require_header=False)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ("none", ""),
        ("version", "a==2.0 was installed; the lock pins a==1.0"),
        ("unpinned", "b==1.0 was installed but the lock no longer pins b"),
        ("hash", "its installed wheel sha256:cccc"),
        ("old-record", "recorded no lock body digest"),
    ],
)
def test_binding_problems_each_named(tmp_path: Path, edit: str, words: str) -> None:
    a, c = "a" * 64, "c" * 64
    lock = _lock(tmp_path, f"a==1.0 \\\n    --hash=sha256:{a}\n")
    marker = binding.record(lock, binding.from_pip_report(
        {"install": [{"metadata": {"name": "A", "version": "1.0"},
                      "download_info": {"archive_info": {"hashes": {"sha256": a}}}}]}, lock), binding.HashSource.REPORT)
    wheels = marker[binding.WHEELS]
    assert isinstance(wheels, dict) and wheels == {"a": {"version": "1.0", "sha256": [a]}}
    if edit == "version":
        wheels["a"]["version"] = "2.0"
    elif edit == "unpinned":
        wheels["b"] = {"version": "1.0", "sha256": [a]}
    elif edit == "hash":
        wheels["a"]["sha256"] = [c]
    elif edit == "old-record":
        del marker[binding.BODY]
    found = binding.problems(marker, lock)
    assert (found == []) if edit == "none" else any(words in f for f in found), found
