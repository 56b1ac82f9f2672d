"""``kernodeck init``: make an existing repository a Kernodeck project, starting green.

It writes noxfile.py, ``[tool.kernodeck]`` and the pinned tool groups (merged into pyproject.toml with tomlkit, every
other table and comment kept), requirements/*.in, the application entry checks/app.py with its sample, dossier/,
lockfiles/ and a CI workflow, and adds Kernodeck's run folders to .gitignore. The templates ship inside the
distribution (``project/templates``). A file that exists is never overwritten, nor an existing ``[tool.kernodeck]``
replaced, without ``--force``: then nothing at all is written.
"""

from __future__ import annotations

import enum
import os
import sys
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, assert_never

import tomlkit
import tomlkit.exceptions
from tomlkit.container import Container

from kernodeck import __version__, tips
from kernodeck._fs import write_atomic
from kernodeck.errors import ConfigError, WouldOverwrite
from kernodeck.project.platforms import current_os_arch

# template (under kernodeck/project/templates) -> where it goes in the project
FILES = {
    "noxfile.py.tmpl": "noxfile.py",
    "requirements/base.in.tmpl": "requirements/base.in",
    "requirements/torch-cpu.in.tmpl": "requirements/torch-cpu.in",
    "checks/app.py.tmpl": "checks/app.py",
    "data/sample.jsonl.tmpl": "data/sample.jsonl",
    "lockfiles/README.md.tmpl": "lockfiles/README.md",
    "dossier/README.md.tmpl": "dossier/README.md",
    ".github/workflows/kernodeck.yml.tmpl": ".github/workflows/kernodeck.yml",
}
PYPROJECT = "pyproject.toml"
GITIGNORE = ".gitignore"
GROUP_PREFIX = "kernodeck-"
NEXT = f"{tips.LOCK} && {tips.nox('reference')} && {tips.VERIFY}"
NEXT_EDITED = f"{tips.LOCK} && {tips.NEW_REFERENCE} && {tips.VERIFY}"


class Action(enum.StrEnum):
    CREATE = "create"
    OVERWRITE = "overwrite"  # only with --force
    MERGE = "merge"  # pyproject.toml, .gitignore: added to what is there
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Planned:
    path: str  # relative to the project root
    action: Action
    text: str


def template(name: str) -> str:
    return (resources.files("kernodeck.project") / "templates" / name).read_text(encoding="utf-8")


def render(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    if "@@" in text:
        raise AssertionError(f"a template placeholder was left unfilled: {text[text.index('@@'):][:40]!r}")
    return text


def _values() -> dict[str, str]:
    return {"PIN": f"kernodeck=={__version__}", "PYTHON": f"{sys.version_info.major}.{sys.version_info.minor}",
            "OS_ARCH": current_os_arch()}


def merge_pyproject(existing: str | None, addition: str, *, force: bool) -> tuple[str, list[str]]:
    """``existing`` with the template's ``[dependency-groups] kernodeck-*`` and ``[tool.kernodeck]`` added.

    Returns the new text and what it would replace (empty unless the project already declares Kernodeck, which only
    ``force`` allows). Everything else in ``existing`` (tables, key order, comments, formatting) is kept as it was.
    """
    if existing is None or not existing.strip():
        return addition, []
    try:
        doc = tomlkit.parse(existing)
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(f"{PYPROJECT} is not valid TOML ({exc}); nothing was written",
                          tip=f"fix {PYPROJECT}, then: kernodeck init") from None
    add = tomlkit.parse(addition.rstrip("\n") + "\n\n")  # a blank line after each table it brings
    replaced: list[str] = []
    groups = doc.get("dependency-groups")
    new_groups = add["dependency-groups"]
    if groups is None:
        if not tomlkit.dumps(doc).endswith("\n\n"):
            doc.add(tomlkit.nl())
        doc.append("dependency-groups", new_groups)
    else:
        for name, value in new_groups.items():
            if name in groups:
                replaced.append(f"{PYPROJECT} [dependency-groups] {name}")
                groups[name] = value
            else:
                _add_after_last_key(groups, name, value)
    tool = doc.get("tool")
    if tool is None:
        doc.append("tool", add["tool"])
    else:
        if "kernodeck" in tool:
            replaced.append(f"{PYPROJECT} [tool.kernodeck]")
            del tool["kernodeck"]
        tool["kernodeck"] = add["tool"]["kernodeck"]
    if replaced and not force:
        return existing, replaced
    return tomlkit.dumps(doc).rstrip("\n") + "\n", replaced


def _add_after_last_key(table: Any, name: str, value: Any) -> None:
    """Add ``name = value`` right after the table's last key, before the comments that lead to the next table."""
    keys = list(table.keys())
    container = getattr(table, "value", None)
    if keys and isinstance(container, Container):
        # tomlkit keeps the comment lines above the next [table] in this table's body: a plain append would put the
        # new key below them. _insert_after is tomlkit's own positional insert (the version is pinned; tests cover it).
        container._insert_after(keys[-1], name, value)
    else:
        table[name] = value


def _gitignore(existing: str | None) -> str:
    lines = existing.splitlines() if existing else []
    missing = [line for line in template("gitignore.tmpl").splitlines() if line and line not in lines]
    if not missing:
        return existing or ""
    head = (existing or "").rstrip("\n")
    block = "# Kernodeck: rebuilt envs, run dossiers, nox venvs, wheelhouses\n" + "\n".join(missing) + "\n"
    return f"{head}\n\n{block}" if head else block


def plan(root: Path, *, force: bool) -> list[Planned]:
    """What init would do in ``root``; raises :class:`WouldOverwrite` (nothing written) unless ``force``."""
    values = _values()
    planned: list[Planned] = []
    conflicts: list[str] = []
    for name, dest in FILES.items():
        text = render(template(name), values)
        path = root / dest
        if not path.exists():
            planned.append(Planned(dest, Action.CREATE, text))
        elif path.is_file() and path.read_text(encoding="utf-8", errors="replace") == text:
            planned.append(Planned(dest, Action.UNCHANGED, text))
        else:
            conflicts.append(dest)
            planned.append(Planned(dest, Action.OVERWRITE, text))
    py = root / PYPROJECT
    existing = py.read_text(encoding="utf-8") if py.exists() else None
    merged, replaced = merge_pyproject(existing, render(template("pyproject.toml.tmpl"), values), force=True)
    if existing is not None and tomllib.loads(merged) == tomllib.loads(existing):  # declared already, as the template
        planned.append(Planned(PYPROJECT, Action.UNCHANGED, merged))
    else:
        conflicts += replaced
        planned.append(Planned(PYPROJECT, Action.CREATE if existing is None else Action.MERGE, merged))
    gi = root / GITIGNORE
    old = gi.read_text(encoding="utf-8") if gi.exists() else None
    new = _gitignore(old)
    action = Action.UNCHANGED if new == old else (Action.MERGE if old else Action.CREATE)
    planned.append(Planned(GITIGNORE, action, new))
    if conflicts and not force:
        raise WouldOverwrite(conflicts)
    return planned


def _verb(action: Action) -> str:
    if action is Action.CREATE:
        return "created"
    if action is Action.OVERWRITE:
        return "overwrote"
    if action is Action.MERGE:
        return "merged into"
    if action is Action.UNCHANGED:
        return "unchanged"
    assert_never(action)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def init(root: Path, *, force: bool = False) -> list[Planned]:
    """Scaffold ``root``; every file written atomically, and only once the whole plan is known to be allowed."""
    planned = plan(root, force=force)
    for item in planned:
        if item.action is not Action.UNCHANGED:
            path = root / item.path
            mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
            write_atomic(path, item.text)
            path.chmod(mode)  # a temporary file is private (0600): give the file the mode it had, or the usual one
    return planned


def source_line(environ: dict[str, str] | None = None) -> str:
    """Which Kernodeck the nox sessions will install (:func:`kernodeck.noxsessions.kernodeck_source`), in words."""
    from kernodeck import noxsessions

    env = dict(os.environ) if environ is None else environ
    pin = _values()["PIN"]
    source = noxsessions.kernodeck_source(pin, env)
    if env.get(noxsessions.SOURCE_ENV, "").strip():
        why = f"${noxsessions.SOURCE_ENV}"
    elif source != pin:
        why = "where the Kernodeck beside nox was installed from"
    else:
        why = "the noxfile's pin"
    return f"the nox sessions install Kernodeck from {source} ({why})"


def summary(planned: list[Planned], environ: dict[str, str] | None = None) -> list[str]:
    """What init did, and what comes next: the template passes as it is, so the sessions first, then the edits."""
    lines = [f"  {_verb(p.action):<12} {p.path}" for p in planned]
    return [*lines, source_line(environ),
            "next: the template application passes as it is; from this folder:", f"  {NEXT}",
            "then edit requirements/base.in, checks/app.py and [tool.kernodeck.application] (tolerances with their"
            " justification) and make your own reference:", f"  {NEXT_EDITED}"]

