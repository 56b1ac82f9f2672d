"""The reference manifest (``dossier/reference/manifest.toml``): its model, its identity, loading and validating it,
rendering it, and what differs between two manifests or between one and the declaration.

The manifest is generic over the declared application: the entry and criterion, the code files' fingerprints, the
parameters, the sample's fingerprint, the weights (exact version, wheel hashes, file digests) when declared, each
output with its kind, dtype, tolerance, justification, shape and file digests, the criterion's result on the
reference, and the environment the outputs came from. Its id is the digest of all of that except ``[provenance]``
(commit, dirty flag, previous id): committing the reference changes the commit, and must not change what the
reference IS.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kernodeck import outdir, tips
from kernodeck._fs import sha256_file, sha256_text
from kernodeck.errors import ManifestError
from kernodeck.project.app_contract import Application
from kernodeck.project.config import Project

FORMAT = 2
_HEX = re.compile(r"^[0-9a-f]{64}$")
_FLOATING = re.compile(r"(latest|main|master|head|stable|current|newest|\*)", re.IGNORECASE)


def identity(manifest: dict[str, Any]) -> str:
    content = {k: v for k, v in manifest.items() if k not in ("id", "provenance")}
    return "sha256:" + sha256_text(json.dumps(content, sort_keys=True, separators=(",", ":"), default=str))


def _line_of(exc: tomllib.TOMLDecodeError) -> str:
    match = re.search(r"line (\d+)", str(exc))
    return match.group(1) if match else "?"


def _check_source(record: dict[str, Any], where: str) -> None:
    """Refuse a recorded hf, url or path source that can float: no commit, no sha256, no per-file digest."""
    kind = str(record.get("kind"))
    what = record.get("hf") or record.get("url") or record.get("path") or kind
    if kind == "hf" and not re.fullmatch(r"[0-9a-f]{40}", str(record.get("revision", ""))):
        raise ManifestError(f"{where}: {what} has revision {record.get('revision')!r}, not a 40-hex commit")
    if kind == "url" and not _HEX.match(str(record.get("sha256", ""))):
        raise ManifestError(f"{where}: {what} carries no sha256")
    if kind not in ("hf", "url", "path"):
        raise ManifestError(f"{where}: unknown source kind {kind!r}")
    files = record.get("files") or {}
    if not isinstance(files, dict) or not files:
        raise ManifestError(f"{where}: {what} carries no file digests (a name alone can change)")
    bad = [f for f, d in files.items() if not isinstance(d, str) or not _HEX.match(d)]
    if bad:
        raise ManifestError(f"{where}: file digest is not a sha256 for {', '.join(bad)}")
    if kind == "url" and list(files.values()) != [record["sha256"]]:
        raise ManifestError(f"{where}: {what}'s file digest is not its declared sha256")


def check_weights(weights: dict[str, Any], where: str) -> None:
    """Refuse a weights (or data) reference that can float: no exact version, a name like "latest", or no digest."""
    if "kind" in weights:
        _check_source(weights, where)
        return
    version = str(weights.get("version", ""))
    name = str(weights.get("package", ""))
    if not name:
        raise ManifestError(f"{where}: weights name no package")
    if not version or _FLOATING.search(version):
        raise ManifestError(f"{where}: weights {name!r} have a floating version {version!r}; pin an exact version")
    try:
        Version(version)
    except InvalidVersion:
        raise ManifestError(f"{where}: weights {name!r} version {version!r} is not an exact version") from None
    files = weights.get("files") or {}
    if not files:
        raise ManifestError(f"{where}: weights {name}=={version} carry no file digests (a name alone can change)")
    bad = [f for f, d in files.items() if not isinstance(d, str) or not _HEX.match(d)]
    if bad:
        raise ManifestError(f"{where}: weights file digest is not a sha256 for {', '.join(bad)}")


@dataclass(frozen=True)
class Reference:
    folder: Path
    manifest: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.manifest["id"])

    def run_config(self, project: Project, declared: Application | None = None) -> dict[str, Any]:
        """What the in-env steps need from the reference (paths relative to the project root).

        ``reference.code``: the fingerprint each declared code file must have (:func:`code_expected`);
        ``criterion.margin``: the reference's recorded margin (the flip bound is derived again in the env from it).
        """
        app = self.manifest["application"]
        weights = self.manifest.get("weights")
        outputs = self.manifest["outputs"]
        margin = (self.manifest.get("criterion") or {}).get("margin")
        numeric = isinstance(margin, int | float) and not isinstance(margin, bool)
        return {
            "criterion": {"margin": margin if numeric else None},
            "application": {
                "entry": _target(app["entry"]),
                "criterion": _target(app["criterion"]) if app.get("criterion") else None,
                "sample": self.manifest["data"]["sample"],
                "sample_sha256": self.manifest["data"]["sha256"],
                "params": app.get("params", {}),
                "weights": _source_config(weights) if weights else None,
                "data": {name: _source_config(rec)
                         for name, rec in (self.manifest["data"].get("sources") or {}).items()},
                "outputs": {name: _declared(rec) for name, rec in outputs.items()},
            },
            "reference": {
                "dir": os.path.relpath(self.folder, project.root),
                "code": code_expected(self.manifest, declared),
                "outputs": {
                    name: {k: rec[k] for k in ("file", "sha256", "ids", "ids_sha256", "shape")}
                    for name, rec in outputs.items()
                },
                "records": record_files(self.manifest),
            },
        }


def _source_config(record: dict[str, Any]) -> dict[str, Any]:
    """What the in-env side needs of a recorded source: the declaration and the per-file digests."""
    if "kind" not in record:
        return {k: record[k] for k in ("package", "module", "subdir", "files")}
    return {k: v for k, v in record.items() if k not in ("provenance", "fetch", "access")}


def _declared_source(record: dict[str, Any]) -> dict[str, Any]:
    """A recorded source's declaration (what pyproject must still say): without what the run derived."""
    return {k: v for k, v in record.items()
            if k not in ("provenance", "fetch", "access", "files", "version", "wheel_sha256")}


def code_expected(manifest: dict[str, Any], declared: Application | None) -> dict[str, str]:
    """Each code file and the sha256 it must have: the reference's fingerprints, and "" (matches no file) for a file
    declared now (entry, criterion, ``code``, ``data``) that the reference did not fingerprint."""
    recorded = manifest["application"].get("code") or {}
    expected = {str(f): str(d) for f, d in recorded.items()} if isinstance(recorded, dict) else {}
    for rel in declared.sources if declared is not None else ():
        expected.setdefault(rel, "")
    return expected


def _target(text: str) -> dict[str, str]:
    file, _, function = text.partition(":")
    return {"file": file, "function": function}


_OUTPUT_FILES = ("file", "sha256", "ids", "ids_sha256", "shape")


def output_files(manifest: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(file, its sha256 in the manifest) for each expected output and its ids (format 1: embeddings and ids)."""
    raw = manifest.get("outputs")
    outputs: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if manifest.get("format") == 1:
        return [(str(outputs.get(k, f"{k}?")), outputs.get(f"{k}_sha256")) for k in ("embeddings", "ids")]
    files: list[tuple[str, str | None]] = []
    for rec in outputs.values():
        if isinstance(rec, dict):
            files += [(str(rec.get("file", "?")), rec.get("sha256")), (str(rec.get("ids", "?")), rec.get("ids_sha256"))]
    return files


# The reference's own records beside its outputs, each with its sha256 in [environment] (inside the id): what verify's
# "What differs from the reference" reads (red-team pass 51, REFREC1: an edited system.json hid two variables' change;
# pass 54, THR1: the settings it ran with, torch's thread counts among them, were kept nowhere)
RECORD_FILES = {"inventory": "inventory.txt", "system": "system.json", "settings": "settings.json"}
RECORDS = tuple((name, f"{name}_sha256") for name in RECORD_FILES)


def record_files(manifest: dict[str, Any]) -> dict[str, str]:
    """{file: sha256} of the reference's records its manifest fingerprints (none for one made before they were)."""
    env = manifest.get("environment")
    if not isinstance(env, dict):
        return {}
    return {str(env[name]): str(env[key]) for name, key in RECORDS if env.get(name) and env.get(key)}


def inconsistency(folder: Path) -> str:
    """Why ``folder``'s files do not match its own manifest ('' when they do): what a history entry must satisfy."""
    try:
        manifest = tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return f"manifest.toml unreadable ({exc})"
    if manifest.get("id") != identity(manifest):
        return "manifest.toml's id does not match its content"
    files = output_files(manifest)
    if not files:
        return "the manifest names no outputs"
    for name, digest in [*files, *record_files(manifest).items()]:
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if sha256_file(path) != digest:
            return f"{name} does not match the manifest's digest"
    return ""


def _declared(record: dict[str, Any]) -> dict[str, Any]:
    """An output's declaration as the manifest recorded it (kind, dtype, tolerance, justification)."""
    return {k: v for k, v in record.items() if k not in _OUTPUT_FILES}


def table_differences(declared: dict[str, Any], recorded: dict[str, Any], derived: frozenset[str]) -> list[str]:
    """Where a recorded copy differs from its declaration: ``key: recorded -> declared``, generic over the keys.

    Keys compare with ``-`` and ``_`` as one (pyproject spells ``cosine-min``, the manifest ``cosine_min``); keys in
    ``derived`` are written by Kernodeck from the others (a justification) and are not part of the declaration.
    """
    want = {k.replace("-", "_"): v for k, v in declared.items()}
    have = {k.replace("-", "_"): v for k, v in recorded.items() if k.replace("-", "_") not in derived}
    return [
        f"{k}: {have.get(k, '(missing)')!r} -> declared {want.get(k, '(not declared)')!r}"
        for k in sorted(set(want) | set(have))
        if k not in want or k not in have or canonical(want[k]) != canonical(have[k])
    ]


def canonical(value: object) -> object:
    """A TOML value as a comparable form that keeps its type and sign: ``true`` is not ``1``, ``1.0`` is not ``1``,
    ``-0.0`` is not ``0.0``, and NaN is NaN (``==`` says the first three are equal and NaN unequal to itself)."""
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return ("bool", value)
    if isinstance(value, int):
        return ("int", int(value))
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(float(value)))  # repr: -0.0, inf; any NaN is one
    if isinstance(value, str):
        return ("str", str(value))
    if isinstance(value, dict):
        return ("table", tuple(sorted((str(k), canonical(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("array", tuple(canonical(v) for v in value))
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return (type(value).__name__, value.isoformat())
    return (type(value).__name__, repr(value))


def declaration_differences(manifest: dict[str, Any], app: Application) -> list[str]:
    """Where the reference's recorded copy differs from what pyproject declares now (the declaration: the contract)."""
    recorded = {name: _declared(rec) for name, rec in manifest["outputs"].items()}
    out = []
    for name in sorted(set(recorded) | set(app.outputs)):
        if name not in recorded or name not in app.outputs:
            out.append(f"output {name}: {'not in the reference' if name not in recorded else 'no longer declared'}")
            continue
        found = table_differences(app.outputs[name].declared(), recorded[name], frozenset())
        out += [f"outputs.{name}.{d}" for d in found]
    declared_app = {
        "entry": str(app.entry),
        "criterion": str(app.criterion) if app.criterion else "",
        "params": app.params,
    }
    rec_app = {k: v for k, v in manifest["application"].items() if k != "code"}
    out += [f"application.{d}" for d in table_differences(declared_app, rec_app, frozenset())]
    found = table_differences({"sample": app.sample}, {"sample": manifest["data"]["sample"]}, frozenset())
    out += [f"data.{d}" for d in found]
    # another revision, file, hash, path or package is another reference
    weights = manifest.get("weights")
    declared_w = app.weights.as_config() if app.weights else {}
    out += [f"weights.{d}" for d in table_differences(declared_w, _declared_source(weights) if weights else {},
                                                        frozenset())]
    recorded_data = manifest["data"].get("sources") or {}
    for name in sorted(set(recorded_data) | set(app.data)):
        want = app.data[name].as_config() if name in app.data else {}
        have = _declared_source(recorded_data[name]) if name in recorded_data else {}
        out += [f"data.{name}.{d}" for d in table_differences(want, have, frozenset())]
    return out


def load(project: Project) -> Reference:
    folder = project.reference
    path = folder / "manifest.toml"
    if not folder.exists():
        outdir.clean_leftovers(folder)  # a run killed while swapping the reference in: put the parked one back
    if not path.exists():
        raise ManifestError(
            f"no reference manifest at {path.relative_to(project.root)}",
            tip=f"make the reference first: {tips.NEW_REFERENCE}",
        )
    try:
        manifest = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path.relative_to(project.root)}:{_line_of(exc)}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{path.relative_to(project.root)}: not UTF-8 text") from None
    where = str(path.relative_to(project.root))
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"{where}: format {manifest.get('format')!r}, this Kernodeck reads format {FORMAT}")
    for table in ("application", "data", "outputs", "environment"):
        if not isinstance(manifest.get(table), dict):
            raise ManifestError(f"{where}: missing [{table}] table (truncated?)")
    for name, rec in manifest["outputs"].items():
        missing = [k for k in (*_OUTPUT_FILES, "kind", "dtype") if k not in rec]
        if missing:
            raise ManifestError(f"{where}: [outputs.{name}] lacks {', '.join(missing)} (truncated?)")
    if "weights" in manifest:
        check_weights(manifest["weights"], where)
    for name, record in (manifest["data"].get("sources") or {}).items():
        check_weights(record, f"{where} [data.sources.{name}]")
    recorded, actual = manifest.get("id"), identity(manifest)
    if recorded != actual:
        raise ManifestError(f"{where}: recorded id {recorded} does not match its content ({actual}): edited by hand?")
    # The sample and the expected outputs are checked against these fingerprints INSIDE the env, by the data-loading
    # and reference steps, so that a failure there is attributed to its layer.
    return Reference(folder, manifest)


def recorded_id(project: Project) -> str | None:
    """The id a manifest records, even one this version cannot use (an older format): the new one's previous id."""
    try:
        value = tomllib.loads((project.reference / "manifest.toml").read_text(encoding="utf-8")).get("id")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return value if isinstance(value, str) else None


def render(manifest: dict[str, Any]) -> str:
    import tomlkit  # only a new reference writes a manifest: verify reads them (tomllib)

    doc = tomlkit.document()
    doc.add(
        tomlkit.comment(f"Kernodeck reference manifest: written by `{tips.NEW_REFERENCE}`; do not edit by hand.")
    )
    doc.add(tomlkit.comment("id = digest of every table except [provenance]; any change of content gives a new id."))
    doc.add("id", manifest["id"])
    for key, value in manifest.items():
        if key != "id":
            doc.add(key, value)
    return tomlkit.dumps(doc)


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two manifests, by section: ``application: params.batch-size, code`` (leaf paths)."""
    out = []
    for key in sorted(set(old) | set(new)):
        if key in ("id", "provenance") or canonical(old.get(key)) == canonical(new.get(key)):
            continue
        sub_old, sub_new = old.get(key), new.get(key)
        if isinstance(sub_old, dict) and isinstance(sub_new, dict):
            out.append(f"{key}: {', '.join(_leaf_changes(sub_old, sub_new))}")
        else:
            out.append(key)
    return out


def _leaf_changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    found: list[str] = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if canonical(a) == canonical(b):
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            found.extend(_leaf_changes(a, b, f"{prefix}{k}."))
        else:
            found.append(f"{prefix}{k}")
    return found
