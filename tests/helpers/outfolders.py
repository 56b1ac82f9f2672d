"""The --out rule's fixtures: a project without its lock, a finished dossier, a folder's snapshot, a refusal read
back."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kernodeck import outdir
from tests.helpers.project import copy_project


def lockless(tmp_path: Path) -> Path:
    """A project copy without lockfiles (verify fails at lock-check, fast) and with a git folder of its own."""
    project = copy_project(tmp_path / "project")
    for lock in (project / "lockfiles").iterdir():
        lock.unlink()
    subprocess.run(["git", "init", "--quiet", str(project)], check=True, capture_output=True)
    return project


def finished_dossier(folder: Path) -> Path:
    """A finished folder of Kernodeck's made at ``folder`` (a verify dossier: its files and the marker listing them)."""
    (folder / "outputs").mkdir(parents=True)
    (folder / "report.md").write_text("# report\n", encoding="utf-8")
    (folder / "outputs" / "embeddings.npy").write_bytes(b"\x93NUMPY")
    outdir.mark(folder, "dossier")
    assert outdir.foreign(folder) == []
    return folder


def tools_bytecode(rel: Path) -> bool:
    """The interpreter's bytecode of the tool's own runtime in a project (``rel``: a path in it): the noxfile's, which
    nox writes as it loads it, and, in a copy of this repository, Kernodeck's own modules, which ``python -m kernodeck``
    writes as it imports them (docs/env-integrity.md, "What it does not cover"). Written only where
    PYTHONDONTWRITEBYTECODE is unset, as on most machines; never a file of the application's."""
    parts = rel.parts
    return (rel.suffix == ".pyc" and "__pycache__" in parts
            and (parts[0] == "kernodeck" or (parts[:1] == ("__pycache__",) and rel.name.startswith("noxfile."))))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes, but the tool's own bytecode (:func:`tools_bytecode`)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not tools_bytecode(p.relative_to(folder))}


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, proc.stderr
    assert "TIP:" in proc.stderr, proc.stderr
    for word in words:
        assert word in errors[0], errors[0]
