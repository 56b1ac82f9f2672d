"""What a declared built-here pin's reach leaves in an env being built (red-team passes 73-77): tinya's module
rewritten (``REACHED``) and read back from a promoted env with its binding; a standard library linked aside whose
``encodings`` leads with a reach run at an interpreter's start-up (before any module of the process is imported); the
broken lock of passes 76-79 (tinyc requires what the lock lacks, tinyd built here) and its pip check record."""

from __future__ import annotations

import base64
import hashlib
import json
import sysconfig
from pathlib import Path

from tests.helpers.project import kd
from tests.helpers.tinylock import (
    SDIST_BACKEND,
    declare_built_here,
    env_wheels,
    locked_tiny_project,
    offline_env,
    promoted_env,
    wheel_of,
    write_sdist,
    write_wheel,
)

REACHED = b"VALUE = 'written by tinyd'"  # what the reach writes into tinya's module


def tinya_bytes(env: Path) -> bytes:
    return next(env.glob("lib/python*/site-packages/tinya/__init__.py")).read_bytes()


def bound(env: Path) -> object:
    """tinya's binding in the promoted env's completion record, and the pins recorded as built here."""
    record = json.loads((env / "kernodeck-complete.json").read_text(encoding="utf-8"))
    return record.get("wheels", {}).get("tinya"), [b.get("name") for b in record.get("built_here", [])]


def record_line(path: str, data: bytes) -> str:
    """A RECORD line for ``path`` holding ``data``."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


# In the reader of an env being built (its command line runs pip's main; os's calls only: open() is not defined yet),
# tinya's module and its RECORD line rewritten, then TAIL (what the reach undoes before the process runs again);
# given MARK, only a mark that it ran.
_REACH = r'''
def _kd_reach():
    import os  # frozen; open() is not defined yet: os's calls only
    def read(path):
        fd, data = os.open(path, os.O_RDONLY), b""
        while chunk := os.read(fd, 1 << 16):
            data += chunk
        os.close(fd)
        return data
    def write(path, data):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.write(fd, data)
        os.close(fd)
    argv = read("/proc/self/cmdline").split(b"\0")[:-1]
    if not any(b"pip._internal.cli.main" in a for a in argv) or b"/.venv-rebuild/" not in argv[0]:
        return
    env = os.path.dirname(os.path.dirname(argv[0]))
    if MARK:
        write(MARK, read(MARK) + env + b"\n" if os.path.exists(MARK) else env + b"\n")
    else:
        lib = os.path.join(env, b"lib")
        site = os.path.join(lib, os.listdir(lib)[0], b"site-packages")
        write(os.path.join(site, b"tinya", b"__init__.py"), REACHED)
        record = os.path.join(site, b"tinya-1.0.dist-info", b"RECORD")
        write(record, b"\n".join(LINE if l.startswith(b"tinya/__init__.py,") else l
                                 for l in read(record).splitlines()) + b"\n")
TAIL
_kd_reach()
del _kd_reach
'''


def linked_stdlib(root: Path, mark: Path | None, tail: str) -> Path:
    """Another standard library under ``root``: the base's, linked entry by entry, its ``encodings/__init__.py`` led by
    the reach (undoing ``tail``); its folder."""
    base = Path(sysconfig.get_path("stdlib"))
    lib = root / "lib" / base.name
    (lib / "encodings").mkdir(parents=True)
    for entry in base.iterdir():
        if entry.name not in ("encodings", "site-packages", "__pycache__"):
            (lib / entry.name).symlink_to(entry)
    for entry in (base / "encodings").iterdir():
        if entry.name not in ("__init__.py", "__pycache__"):
            (lib / "encodings" / entry.name).symlink_to(entry)
    lead = _REACH.replace("TAIL", tail).replace("MARK", repr(str(mark).encode() if mark else b"")) \
        .replace("REACHED", repr(REACHED)).replace("LINE", repr(record_line("tinya/__init__.py", REACHED).encode()))
    (lib / "encodings" / "__init__.py").write_text(
        lead + (base / "encodings" / "__init__.py").read_text(encoding="utf-8"), encoding="utf-8")
    return lib


WHEEL_ENTRY = '             f"{info}/METADATA":'  # SDIST_BACKEND's line before which more wheel entries go


def broken_lock(tmp_path: Path, extra: str = "") -> tuple[Path, dict[str, str]]:
    """The tiny lock plus tinyc 1.0 (a wheel requiring tinymissing, which the lock lacks: its pip check fails), tinyd
    by its sdist, declared built-here; ``extra``: more entries of tinyd's built wheel (lines of its backend's dict)."""
    links, backends = tmp_path / "links", tmp_path / "backends"
    assert WHEEL_ENTRY in SDIST_BACKEND
    backend = SDIST_BACKEND.replace(WHEEL_ENTRY, extra + WHEEL_ENTRY)
    sdist = write_sdist(links, "tinyd", "1.0", "VALUE = 'the lock'\n", backend="tinybuild")
    wheel_of(backends, "tinybuild", "1.0", {"tinybuild/__init__.py": backend.encode()})
    wheels = [*env_wheels(links), write_wheel(links, "tinyc", "1.0", ("tinymissing",))]
    project, _ = locked_tiny_project(tmp_path / "project", wheels, (("tinyd", "1.0", [sdist]),))
    declare_built_here(project, "tinyd")
    env = offline_env(PIP_FIND_LINKS=f"{links} {backends}", PIP_CACHE_DIR=str(tmp_path / "pipc"),
                      UV_CACHE_DIR=str(tmp_path / "uvc"))
    return project, env


def pip_check(promoted: Path | None) -> object:
    """What a promoted env's completion record says of pip check (None: nothing promoted)."""
    return None if promoted is None else json.loads(
        (promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))["pip_check"]


def refused(project: Path, env: dict[str, str], installer: str, said: str) -> None:
    """A rebuild of ``project`` by ``installer`` fails (exit 2) saying ``said``, and promotes nothing."""
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr[-800:]
    assert promoted_env(project) is None


def never_promoted(project: Path, env: dict[str, str], installer: str) -> None:
    """A rebuild of a :func:`broken_lock` (tinyc requires tinymissing) promotes no env, whatever its build carries."""
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    assert proc.returncode in (0, 2), proc.stderr[-800:]
    assert promoted is None, f"promoted (rc {proc.returncode}), pip_check recorded {pip_check(promoted)!r}; tinyc " \
                             "requires tinymissing"

