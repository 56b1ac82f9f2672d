"""The built project's siblings: a copy that shares its rebuilt env, code run in that env, a reference resealed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file, write_atomic
from kernodeck.project.config import load_project
from kernodeck.runformat import manifest as dossier_manifest
from tests.helpers import crossworker
from tests.helpers.project import ROOT, copy_project

# Never part of a copy of an example: what a run leaves behind.
EXAMPLE_LEFT_BEHIND = shutil.ignore_patterns(".nox", ".venv-rebuild", "runs", "__pycache__", ".wheelhouse")


def env_python(project: Path) -> Path:
    return project / ".venv-rebuild" / "cp311-linux_x86_64-cpu" / "current" / "bin" / "python"


def sibling(built: Path, tmp_path: Path) -> Path:
    """A fresh copy of the project sharing the built environment (reused: same lock, same interpreter)."""
    project = copy_project(tmp_path / "project")
    share_env(built, project)
    return project


def share_env(built: Path, project: Path) -> None:
    """``project`` reuses ``built``'s rebuilt envs: its own ``.venv-rebuild/<platform>/`` folders, each with its own
    platform lock, the built ``CURRENT`` pointer, and a link to each built env folder. The lock is the project's own
    so that the sharers' verifies run at once on a parallel run's workers (a link to the whole ``.venv-rebuild`` made
    every verify of every sharer wait for the others' on that one lock file); they only read the env: a test that
    rebuilds or changes an env builds its own."""
    for platform in (built / ".venv-rebuild").iterdir():
        if not platform.is_dir():
            continue
        own = project / ".venv-rebuild" / platform.name
        own.mkdir(parents=True)
        for entry in platform.iterdir():
            if entry.name.startswith("env-") and entry.is_dir():
                (own / entry.name).symlink_to(entry, target_is_directory=True)
            elif entry.is_symlink():  # ``current``: relative, to the env folder's link beside it
                (own / entry.name).symlink_to(os.readlink(entry))
            elif entry.is_file() and not entry.name.startswith("."):  # CURRENT; not the lock
                shutil.copy2(entry, own / entry.name)


def built_example(factory: pytest.TempPathFactory, name: str) -> Path:
    """A copy of ``examples/<name>`` with its env rebuilt once for the whole run, every worker of a parallel run
    included (tests/helpers/crossworker.py), by this checkout's ``python -m kernodeck rebuild`` (this machine's package
    sources: pip's own config). Its readers never change it: each works in :func:`example_copy`."""

    def make(folder: Path) -> dict[str, object]:
        project = Path(shutil.copytree(ROOT / "examples" / name, folder / name, ignore=EXAMPLE_LEFT_BEHIND))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # uv beside python
        proc = subprocess.run([sys.executable, "-m", "kernodeck", "rebuild"], cwd=project, env=env, text=True,
                              capture_output=True, timeout=1500, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"rebuild of examples/{name} failed:\n{proc.stderr[-3000:]}")
        return {"project": str(project)}

    _, made = crossworker.once(factory, f"example-{name}", make)
    return Path(str(made["project"]))


def example_copy(built: Path, dest: Path) -> Path:
    """A user's copy of the example ``built`` was copied from (its files as ``examples/`` has them, nothing a run left
    behind) that shares ``built``'s rebuilt env (:func:`share_env`: same lock, so a rebuild reuses it)."""
    project = Path(shutil.copytree(ROOT / "examples" / built.name, dest, ignore=EXAMPLE_LEFT_BEHIND))
    share_env(built, project)
    return project


def reseal(project: Path, names: tuple[str, ...] | list[str] = ("embeddings",)) -> None:
    """Give an edited reference a consistent manifest (a NEW identity), as `nox -s reference -- --new` would: the
    fingerprints of the outputs ``names`` from their files now there (:func:`refingerprint`, the one manifest
    editor); only the comparison can then tell that its outputs differ."""
    ref = project / "dossier/reference"
    records = tomllib.loads((ref / "manifest.toml").read_text(encoding="utf-8"))["outputs"]
    refingerprint(project, **{f"outputs.{name}": {"sha256": sha256_file(ref / records[name]["file"]),
                                                  "ids_sha256": sha256_file(ref / records[name]["ids"])}
                              for name in names})


def in_env(project: Path, code: str) -> None:
    subprocess.run([str(env_python(project)), "-I", "-c", code], check=True, cwd=project)


def refingerprint(project: Path, **tables: dict[str, object]) -> None:
    """Give the manifest the code's new fingerprint and any edit, its id recomputed: what an adversary (or a careless
    hand) can do. Each keyword names a table by its dotted path (``outputs.embeddings``) and the values to set in it;
    an empty one drops that table."""
    path = project / "dossier/reference/manifest.toml"
    manifest = tomllib.loads(path.read_text(encoding="utf-8"))
    manifest["application"]["code"] = {f: sha256_file(project / f) for f in manifest["application"]["code"]}
    for table, values in tables.items():
        target = manifest
        for part in table.split("."):
            target = target[part]
        target.update(values)
    for key in [k for k, v in tables.items() if not v]:
        parent, _, leaf = key.rpartition(".")
        target = manifest
        for part in parent.split("."):
            target = target[part]
        target.pop(leaf)
    manifest["id"] = dossier_manifest.identity(manifest)
    write_atomic(path, dossier_manifest.render(manifest))
    assert dossier_manifest.load(load_project(project)).id == manifest["id"]
