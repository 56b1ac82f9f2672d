"""``nox -s compare``: every declared output of two dossiers compared under its declared kind.

The verdicts come from the one comparison verify uses (``kernodeck/inenv/tolerance.py``), run by
``inenv/compare_outputs.py`` in a rebuilt env's interpreter: numpy lives there, the orchestrator has none. Each
dossier's declaration is its ``run-config.json`` (what its run was told to write and how to compare it); a pair that
declares other outputs, or the same output otherwise, is said so before any number.
"""

from __future__ import annotations

import json
import tempfile
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernodeck import tips
from kernodeck._fs import inenv_fingerprints, write_atomic
from kernodeck._proc import run
from kernodeck.env import start
from kernodeck.errors import CommandFailed, KernodeckError

if TYPE_CHECKING:
    from kernodeck.project.config import Project

SCRIPT = Path(__file__).resolve().parents[1] / "inenv" / "compare_outputs.py"


# What a reference manifest records of an output besides its declaration (files and digests).
_RECORDED = ("file", "sha256", "ids", "ids_sha256", "shape")


def _manifest(folder: Path) -> dict[str, Any] | None:
    try:
        data = tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return data if isinstance(data.get("outputs"), dict) else None


def reference_report(folder: Path) -> dict[str, Any] | None:
    """A reference folder (``dossier/reference``) seen as a dossier: what its manifest says of its platform, id and
    the lock it was made with (red-team pass 55, REFCMP1: a field left out read as "other locks"). It records no
    steps (:data:`NO_STEPS`): compare says so, never lists them as changed."""
    manifest = _manifest(folder)
    if manifest is None:
        return None
    env = manifest.get("environment", {})
    return {"status": REFERENCE, "platform": env.get("platform"), "reference_id": manifest.get("id"),
            "lock_digest": env.get("lock_digest"), "steps": []}


REFERENCE = "reference"  # a reference's status as a dossier: made, no steps recorded
NO_STEPS = "a reference records no steps"


def outputs_folder(folder: Path) -> Path:
    """Where a dossier's outputs are: ``outputs/`` in a run's dossier, the folder itself in a reference."""
    return folder / "outputs" if (folder / "outputs").is_dir() or not (folder / "manifest.toml").is_file() else folder


def declared_outputs(folder: Path) -> dict[str, dict[str, Any]] | None:
    """The outputs a dossier declared (name -> kind and tolerance): a reference's ``manifest.toml`` (its record, which
    its id covers: a ``run-config.json`` put beside it is not read, red-team pass 49, CMP1), else a run's
    ``run-config.json``; None for a dossier without them."""
    if (manifest := _manifest(folder)) is not None:
        outputs: Any = {name: {k: v for k, v in table.items() if k not in _RECORDED}
                        for name, table in manifest["outputs"].items() if isinstance(table, dict)}
    else:
        try:
            config = json.loads((folder / "run-config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = None
        outputs = config.get("application", {}).get("outputs") if isinstance(config, dict) else None
    return outputs if isinstance(outputs, dict) and outputs else None


def rule(table: dict[str, Any]) -> dict[str, Any]:
    """An output's declaration as the comparison reads it (what two dossiers must share to declare it alike)."""
    return {k: v for k, v in table.items() if k != "justification"}  # the reasoning may be reworded, not the rule


def compare_outputs(dir_a: Path, dir_b: Path, python: Path | None) -> dict[str, Any] | None:
    """Each output the two dossiers declare, B against A under A's declared kind; None when neither declares any.

    ``python``: an interpreter with numpy (a rebuilt env's). Without one nothing is compared, and the result says so.
    """
    da, db = declared_outputs(dir_a), declared_outputs(dir_b)
    if da is None and db is None:
        return None
    return compare_declared(da, db, outputs_folder(dir_a), outputs_folder(dir_b), python)


def compare_declared(da: dict[str, dict[str, Any]] | None, db: dict[str, dict[str, Any]] | None, folder_a: Path,
                     folder_b: Path, python: Path | None) -> dict[str, Any]:
    """Each output both declarations name, ``folder_b``'s against ``folder_a``'s (``NAME.npy`` and ``NAME.ids.json``
    in each) under A's declared kind, by ``inenv/compare_outputs.py`` in ``python``."""
    da, db = da or {}, db or {}
    common = [name for name in da if name in db]
    result: dict[str, Any] = {
        "available": False,
        "declared": {"a": sorted(da), "b": sorted(db)},
        "only_in_a": sorted(set(da) - set(db)),
        "only_in_b": sorted(set(db) - set(da)),
        "declared_differently": sorted(n for n in common if rule(da[n]) != rule(db[n])),
        "per_output": {},
    }
    if not common:
        result["reason"] = "the two dossiers declare no output in common"
        return result
    if python is None:
        result["reason"] = ("no rebuilt env here to compare in (the comparison runs where numpy is: "
                            f"`{tips.REBUILD}` makes one, or pass --python PATH)")
        return result
    with tempfile.TemporaryDirectory(prefix="kernodeck-compare-") as tmp:
        request = Path(tmp) / "request.json"
        write_atomic(request, json.dumps({"a": str(folder_a), "b": str(folder_b),
                                          "outputs": {n: da[n] for n in common},
                                          "inenv_sha256": inenv_fingerprints()}))
        env = start.judging_environ()  # no loader variable of the caller's (LDCMP1); the rest recorded
        result["environment"] = start.recorded(env)
        try:
            proc = run(start.argv(python, str(SCRIPT), str(request)), env=env)
        except CommandFailed as exc:
            raise KernodeckError(f"comparing the outputs in {python} failed: {exc}",
                                 tip=f"{tips.REBUILD}, then: {tips.nox('compare', 'A', 'B')}") from exc
    result["per_output"] = json.loads(proc.stdout)
    result["available"] = True
    result["python"] = str(python)
    return result


def platform_of(folder: Path) -> str | None:
    """The platform id a dossier's report names, if it names one."""
    try:
        report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = report.get("platform") if isinstance(report, dict) else None
    return found if isinstance(found, str) and found else None


def env_python_for(platform_ids: list[str]) -> Path | None:
    """A rebuilt env's interpreter of the project in the current folder, for the first of the platforms it has, once
    its files are the build's (env/sealing.py checked_python: refused otherwise, before it starts)."""
    from kernodeck.env import envdirs, sealing
    from kernodeck.project.config import load_project
    from kernodeck.project.platforms import resolve_platform

    try:
        project = load_project(Path.cwd())
    except KernodeckError:
        return None
    for platform_id in platform_ids:
        try:
            env = envdirs.current_env(project, resolve_platform(project, platform_id))
        except KernodeckError:
            continue
        if env is not None:
            return sealing.checked_python(env)
    return None


def render(result: dict[str, Any]) -> list[str]:
    """The Markdown lines of the outputs section."""
    lines: list[str] = []
    if result["only_in_a"] or result["only_in_b"]:
        lines.append(f"DIFFERENT DECLARED OUTPUTS: only in A: {', '.join(result['only_in_a']) or '-'}; "
                     f"only in B: {', '.join(result['only_in_b']) or '-'} (not compared)")
    for name in result["declared_differently"]:
        lines.append(f"`{name}` is declared differently in A and B (kind or tolerance): compared under A's")
    if not result["available"]:
        lines.append(f"not compared: {result['reason']}")
        return lines
    for name, verdict in result["per_output"].items():
        if not verdict.get("compared"):
            lines.append(f"- `{name}` ({verdict.get('kind')}): {verdict['summary']}")
            continue
        word = "within" if verdict["passed"] else "BEYOND"
        lines.append(f"- `{name}` ({verdict['kind']}): {word} its declared tolerance: {verdict['summary']}")
    return lines


def write(out: Path, text: str, result: dict[str, Any], here: Project | None) -> None:
    """compare.md and compare.json into the folder ``out``, staged and swapped in whole; ``here`` is the project of
    the current folder, if any: its files are never written over (only its runs/ may hold the folder)."""
    from kernodeck import outdir
    from kernodeck._fs import write_json

    final = outdir.check(out, what="compare's output", tip=tips.nox("compare", "A", "B", "--out", "NEW-FOLDER"),
                         root=here.root if here else None, allowed=(here.runs,) if here else ())
    with outdir.staged(final, "compare") as staging:
        write_atomic(staging / "compare.md", text)
        write_json(staging / "compare.json", result)
