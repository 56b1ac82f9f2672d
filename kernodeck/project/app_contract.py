"""The declared application: ``[tool.kernodeck.application]`` in pyproject.toml, read and checked outside the env.

Kernodeck verifies any application that follows a small contract: an entry function in a file of the project, the
sample it reads (JSON lines with a unique string ``id``), the files that make up its identity, free parameters,
optional weights and data (a wheel the lock pins, a Hugging Face snapshot, a URL, a folder: project/assets.py), and
named outputs, each compared under a declared tolerance kind.
Nothing here imports the application or torch; the in-env side (``kernodeck/inenv/``) runs it.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kernodeck._fs import sha256_file
from kernodeck.errors import ConfigError
from kernodeck.inenv import kinds
from kernodeck.project.assets import Source, parse, parse_data
from kernodeck.project.config import OWNED, owned_folders

TABLE = "[tool.kernodeck.application]"
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


def tolerance_fields(kind: str) -> tuple[str, ...]:
    """The tolerance keys a kind needs (and the only ones it accepts): its ``KEYS`` in the kinds table."""
    return tuple(kinds.get(kind).KEYS)


@dataclass(frozen=True)
class Target:
    """``"path/to/file.py:function"``: a function in a file of the project, loaded by path inside the env."""

    file: str
    function: str

    @classmethod
    def parse(cls, text: object, key: str) -> Target:
        if not isinstance(text, str) or text.count(":") != 1:
            raise ConfigError(f'{TABLE} {key} = {text!r}: expected "path/to/file.py:function"')
        file, function = text.split(":")
        if (
            not file.endswith(".py")
            or not function.isidentifier()
            or Path(file).is_absolute()
            or ".." in Path(file).parts
        ):
            raise ConfigError(f"{TABLE} {key} = {text!r}: a .py file inside the project and a function name")
        return cls(Path(file).as_posix(), function)

    def __str__(self) -> str:
        return f"{self.file}:{self.function}"

    def as_config(self) -> dict[str, str]:
        return {"file": self.file, "function": self.function}


@dataclass(frozen=True)
class Output:
    name: str
    kind: str  # a name in the kinds table (kernodeck/inenv/kinds.py)
    dtype: str
    tolerance: dict[str, float]
    justification: str

    def declared(self) -> dict[str, Any]:
        """The output's contract as declared: what the reference manifest records and a verify must find again."""
        return {"kind": str(self.kind), "dtype": self.dtype, **self.tolerance, "justification": self.justification}


@dataclass(frozen=True)
class Application:
    entry: Target
    criterion: Target | None
    sample: str
    code: tuple[str, ...]
    params: dict[str, Any]
    weights: Source | None
    outputs: dict[str, Output] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # other project files the application reads (besides the sample), globs expanded
    data: dict[str, Source] = field(default_factory=dict)  # [...application.data.NAME]: app.data[NAME] in the env
    # the declared extensions' smoke-check files ([tool.kernodeck.extensions.NAME] smoke): they run in the runner's
    # process before the application, and what they leave there (a library function patched, a module global)
    # reaches it, so they are part of what the reference describes, as ``code`` is (red-team pass 13)
    smoke: tuple[str, ...] = ()

    @property
    def sources(self) -> tuple[str, ...]:
        """Every declared project file the application may read besides the sample: ``code``, ``files``, then the
        smoke checks' files, each fingerprinted into the reference; the in-env closed world refuses any other file
        outside the env (the ``weights`` and ``data.NAME`` sources are declared too, and checked file by file at their
        own step)."""
        return tuple(dict.fromkeys([*self.code, *self.files, *self.smoke]))

    @property
    def assets(self) -> tuple[Source, ...]:
        """The declared weights and data sources: ``weights``, then each ``data.NAME`` by name."""
        return ((self.weights,) if self.weights else ()) + tuple(self.data[name] for name in sorted(self.data))

    @property
    def project_paths(self) -> tuple[str, ...]:
        """Every file or folder of the project the application reads, relative to it: the sources, the sample, and
        each ``path`` source the declaration places inside the project (:meth:`Source.in_project`). Sources found
        elsewhere (a cache, a path outside or named by a variable, the lock's wheels) are not among them."""
        inside = [path for src in self.assets if (path := src.in_project()) is not None]
        return tuple(dict.fromkeys([*self.sources, self.sample, *inside]))

    def fingerprints(self, root: Path) -> dict[str, str]:
        """Each declared source's sha256 as read now ("" for a missing file: it matches no bytes)."""
        return {rel: sha256_file(root / rel) if (root / rel).is_file() else "" for rel in self.sources}

    def run_config(self) -> dict[str, Any]:
        """What the in-env runner needs of the declaration (paths relative to the project root)."""
        return {
            "entry": self.entry.as_config(),
            "criterion": self.criterion.as_config() if self.criterion else None,
            "sample": self.sample,
            "params": self.params,
            "weights": self.weights.as_config() if self.weights else None,
            "data": {name: src.as_config() for name, src in self.data.items()},
            "outputs": {name: out.declared() for name, out in self.outputs.items()},
        }


def _output(name: str, raw: object) -> Output:
    return output_from_table(name, raw, f"[tool.kernodeck.application.outputs.{name}]")


def output_from_table(name: str, raw: object, where: str) -> Output:
    """One declared output (its kind, dtype, tolerance, justification); ``where`` names its table in errors."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table")
    if not name.replace("-", "_").isidentifier():
        raise ConfigError(f"{where}: an output name is letters, digits, '-' and '_' (it names outputs/{name}.npy)")
    kind = str(raw.get("kind"))
    if kind not in kinds.KINDS:
        raise ConfigError(f"{where}: kind {raw.get('kind')!r} is not one of {', '.join(kinds.KINDS)}")
    dtype = raw.get("dtype")
    if dtype not in DTYPES:
        raise ConfigError(f"{where}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    needed = tolerance_fields(kind)
    extra = sorted(set(raw) - {"kind", "dtype", "justification", *needed})
    if extra:
        raise ConfigError(
            f"{where}: {', '.join(extra)} not used by kind {kind} (it takes: {', '.join(needed) or 'none'})"
        )
    tolerance: dict[str, float] = {}
    for key in needed:
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: kind {kind} needs a number {key}")
        tolerance[key] = float(value)
    for key, value in tolerance.items():
        low, high = kinds.get(kind).KEYS[key]
        if not low <= value <= high:
            raise ConfigError(f"{where}: {key} = {value} is outside [{low}, {high}]")
    justification = raw.get("justification")
    if not isinstance(justification, str) or not justification.strip():
        raise ConfigError(f"{where}: give a justification: why this tolerance is right for the output's use")
    return Output(name, kind, str(dtype), tolerance, justification.strip())


GLOB = frozenset("*?[")


def expand(patterns: list[str], key: str, root: Path | None, owned: tuple[str, ...] = OWNED) -> list[str]:
    """``code``/``files`` entries as files relative to the root: a glob (``src/mypkg/**/*.py``) is expanded, sorted,
    never into ``__pycache__``, a hidden folder (``.git``, ``.nox``, a wheelhouse) or a folder Kernodeck writes in
    the project (``owned``: the runs, the reference, the envs) unless the pattern names that folder
    (``runs/*/outputs/*.npy``); one that matches no file is refused. Without a root, entries are kept as written."""
    files: list[str] = []
    for pattern in patterns:
        path = Path(pattern)
        if path.is_absolute() or ".." in path.parts:
            raise ConfigError(f"{TABLE} {key}: {pattern!r} is not a path inside the project")
        if root is None or not GLOB & set(pattern):
            files.append(path.as_posix())
            continue
        found = sorted("/".join(rel) for rel in _walk(root, path.parts, owned) if (root.joinpath(*rel)).is_file())
        if not found:
            raise ConfigError(f"{TABLE} {key}: {pattern!r} matches no file")
        files += found
    return files


def _walk(root: Path, pattern: tuple[str, ...], owned: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The files under ``root`` (as parts) that ``pattern`` matches (``**``: any number of folders, never through a
    link, as ``Path.glob``), never descending into the folders ``expand`` leaves out: an env or a run is not walked."""
    literal = [part for part in pattern if not GLOB & set(part)]
    start = 0
    while start < len(pattern) and not GLOB & set(pattern[start]):
        start += 1
    owned_parts = {Path(folder).parts for folder in owned}
    deep = "**" in pattern

    def skipped(folder: tuple[str, ...]) -> bool:
        name = folder[-1]
        if name == "__pycache__" or (not deep and len(folder) >= len(pattern)):
            return True
        return (name.startswith(".") or folder in owned_parts) and name not in literal

    for top, folders, names in os.walk(root.joinpath(*pattern[:start]), followlinks=not deep):
        here = Path(top).relative_to(root).parts
        folders[:] = [name for name in folders if not skipped((*here, name))]
        for name in names:
            if _match(pattern, (*here, name)):
                yield (*here, name)


def _match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    """Whether ``parts`` (a path's parts) match ``pattern``'s, ``**`` standing for any number of folders."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return _match(pattern[1:], parts) or (bool(parts) and _match(pattern, parts[1:]))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match(pattern[1:], parts[1:])


def from_table(table: object, root: Path | None = None, owned: tuple[str, ...] = OWNED) -> Application:
    """The declaration; ``owned``: the folders Kernodeck writes in the project (``config.owned_folders``)."""
    if not isinstance(table, dict):
        raise ConfigError(
            f"pyproject.toml has no {TABLE} table", tip="declare the application (see README: Use it in your project)"
        )
    entry = Target.parse(table.get("entry"), "entry")
    criterion = Target.parse(table["criterion"], "criterion") if table.get("criterion") else None
    sample = table.get("sample")
    if not isinstance(sample, str) or not sample:
        raise ConfigError(f'{TABLE} sample: the JSON-lines file of records (each with a unique string "id")')
    code = table.get("code", [entry.file])
    if not isinstance(code, list) or not all(isinstance(c, str) for c in code):
        raise ConfigError(f"{TABLE} code: a list of files fingerprinted into the reference id")
    code = list(dict.fromkeys(
        [entry.file, *([criterion.file] if criterion else []), *expand(code, "code", root, owned)]))
    files = table.get("files", [])
    if not isinstance(files, list) or not all(isinstance(d, str) for d in files):
        raise ConfigError(f"{TABLE} files: a list of files (globs accepted) fingerprinted into the reference id")
    params = table.get("params", {})
    if not isinstance(params, dict):
        raise ConfigError(f"{TABLE} params must be a table")
    weights = parse("weights", table["weights"]) if table.get("weights") is not None else None
    outputs_raw = table.get("outputs")
    if not isinstance(outputs_raw, dict) or not outputs_raw:
        raise ConfigError(f"{TABLE} declares no outputs: add [tool.kernodeck.application.outputs.NAME] with its kind")
    outputs = {name: _output(name, raw) for name, raw in outputs_raw.items()}
    data = parse_data(table.get("data"))
    return Application(entry, criterion, sample, tuple(code), dict(params), weights, outputs,
                       tuple(expand(files, "files", root, owned)), data)


def smoke_files(extensions: object) -> tuple[str, ...]:
    """The files of the declared smoke checks (``[tool.kernodeck.extensions.NAME]`` ``smoke = "FILE.py:FUNCTION"``)."""
    tables = extensions.values() if isinstance(extensions, dict) else ()
    return tuple(dict.fromkeys(str(t["smoke"]).partition(":")[0] for t in tables
                               if isinstance(t, dict) and isinstance(t.get("smoke"), str)))


def from_tool(tool: dict[str, Any], root: Path | None = None) -> Application:
    """The application of a ``[tool.kernodeck]`` table, with the declared smoke checks' files among its sources."""
    return replace(from_table(tool.get("application"), root, owned_folders(tool)),
                   smoke=smoke_files(tool.get("extensions")))


def load(root: Path) -> Application:
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return from_tool(data.get("tool", {}).get("kernodeck", {}), root)


def tool_table(root: Path, name: str) -> dict[str, Any]:
    """Another ``[tool.kernodeck.NAME]`` table (resume, determinism), empty when absent."""
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    table = data.get("tool", {}).get("kernodeck", {}).get(name, {})
    return dict(table) if isinstance(table, dict) else {}
