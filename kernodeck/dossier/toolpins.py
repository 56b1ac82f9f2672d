"""Kernodeck's own tools in a container, hash-checked as the env beside them: the hashed requirements file export
writes beside the Dockerfile, from the project's committed hash-pinned copy of its run group.

The run group (``[dependency-groups] kernodeck-run``, ``run`` in Kernodeck's checkout) pins versions only; its hashes
live in ``.github/requirements/<group>.txt`` (beside the hash-pinned nox CI installs, kept current by the same
dependabot entry), made once with hashin (in the lock group) and the group's pins (hashin amends an existing file)::

    mkdir -p .github/requirements && touch .github/requirements/kernodeck-run.txt
    python -m hashin -r .github/requirements/kernodeck-run.txt packaging==26.4 tomlkit==0.15.2 ...

Export refuses a file that misses a pin of the group, holds it at another version, or has a requirement without a
hash: ``pip install --require-hashes`` would fail in the build, or install something else than the sessions run.
When Kernodeck is not vendored in the project, the file pins Kernodeck too (``kernodeck==VERSION`` with its hash).
"""

from __future__ import annotations

import re
import tomllib

from kernodeck import __version__
from kernodeck.errors import ConfigError
from kernodeck.project.config import Project

# Where a project keeps its hash-pinned tools (relative to its root), and the file export writes beside the Dockerfile.
FOLDER = ".github/requirements"
FILE_NAME = "kernodeck-tools.txt"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def vendored(project: Project) -> bool:
    """Whether the project holds Kernodeck itself (Kernodeck's own checkout): the container runs that copy."""
    return (project.root / "kernodeck" / "__init__.py").is_file()


def run_group(project: Project) -> tuple[str, list[str]]:
    """The run group's name and requirements (includes followed)."""
    from kernodeck.noxsessions import tool_groups

    data = tomllib.loads((project.root / "pyproject.toml").read_text(encoding="utf-8"))
    groups = data.get("dependency-groups", {})

    def expand(name: str, seen: tuple[str, ...] = ()) -> list[str]:
        if name in seen:
            raise ConfigError(f"[dependency-groups] {name} includes itself")
        out: list[str] = []
        for item in groups.get(name, []):
            out += expand(item["include-group"], (*seen, name)) if isinstance(item, dict) else [str(item)]
        return out

    name = tool_groups(data)["run"]
    return name, expand(name)


def requirements(text: str) -> dict[str, tuple[str, int]]:
    """``{canonical name: (version, number of hashes)}`` of a hash-pinned requirements file; a line that is not a
    ``NAME==VERSION`` pin raises (pip's ``--require-hashes`` takes pins only)."""
    found: dict[str, tuple[str, int]] = {}
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if match is None:
            raise ConfigError(f"not a NAME==VERSION pin: {line[:80]!r}")
        found[_canonical(match.group(1))] = (match.group(2), len(re.findall(r"--hash=sha256:[0-9a-f]{64}", line)))
    return found


def hashed_file(project: Project) -> str:
    """The text of the project's hash-pinned run group, checked against the group's pins; refused with the command
    that makes it when it is missing or stale."""
    name, wanted = run_group(project)
    if not vendored(project):
        wanted = [*wanted, f"kernodeck=={__version__}"]
    path = project.root / FOLDER / f"{name}.txt"
    make = f"python -m hashin -r {FOLDER}/{name}.txt {' '.join(wanted)}"
    if not path.is_file():  # hashin amends a file: it must exist first
        raise ConfigError(f"no {FOLDER}/{name}.txt: the hash-pinned [dependency-groups] {name} the container installs "
                          "its tools from (pip --require-hashes)",
                          tip=f"mkdir -p {FOLDER} && touch {FOLDER}/{name}.txt && {make}")
    text = path.read_text(encoding="utf-8")
    try:
        have = requirements(text)
    except ConfigError as exc:
        raise ConfigError(f"{FOLDER}/{name}.txt: {exc}", tip=make) from None
    problems = [f"{n} has no hash" for n, (_v, hashes) in sorted(have.items()) if hashes == 0]
    for req in wanted:
        pin = _PIN.match(req)
        if pin is None:
            problems.append(f"{req} is not pinned (NAME==VERSION) in [dependency-groups] {name}")
            continue
        got = have.get(_canonical(pin.group(1)))
        if got is None or got[0] != pin.group(2):
            problems.append(f"{req}: {'missing' if got is None else 'the file pins ' + got[0]}")
    if problems:
        raise ConfigError(f"{FOLDER}/{name}.txt does not hash-pin [dependency-groups] {name} as pyproject.toml does: "
                          + "; ".join(problems), tip=make)
    return text
