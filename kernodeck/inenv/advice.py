"""What a closed-world verdict advises for each file it names (world.py judges; this says what to declare).

A file's ``declare`` says where it belongs: ``code`` (Python and compiled modules of the project), ``files`` (anything
else in the project), ``outside the project`` (a ``data.NAME`` source), ``modules cache`` (a model's code copied by
transformers), ``run record`` (a file of this run's own folder that this call may not read: another call's record)
or ``source`` (a file of a declared ``weights`` or ``data.NAME`` source its fingerprint leaves out, as an hf snapshot's
file its ``files`` globs do not take in: named by its place in the source, with ``source`` and ``name``).
"""

from __future__ import annotations

TIP = "nox -s reference -- --new   (once declared; if one holds results of an earlier run, remove the cache instead)"
RUN_RECORD = "run record"
SOURCE = "source"
TIP_SOURCE = ("nox -s reference -- --new   (once the file is added to the source's files; or remove it from the "
              "source's folder, the cache, if the application should not read it)")
TIP_LEFT_OUT = ("nox -s verify   (once the file is removed from the source's folder, or the application reads only the "
                "source's own files: its fingerprint leaves such files out, a new reference would too)")


def declaration(rel: str) -> str:
    """Where a file of the project belongs, by its name."""
    return "code" if rel.endswith((".py", ".pyc", ".so", ".pyd")) else "files"


def json_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def advice(files: list[dict[str, str]]) -> str:
    """One sentence per kind of declaration the named files need."""
    asks = [f"{key} = {json_list([f.get('glob', f['file']) for f in files if f['declare'] == key])}"
            for key in ("code", "files") if any(f["declare"] == key for f in files)]
    said = []
    if asks:
        said.append(f"declare {' and '.join(asks)} in [tool.kernodeck.application] "
                    '(globs accepted, e.g. "src/mypkg/**/*.py")')
    if any(f["declare"] == "outside the project" for f in files):
        said.append("a file outside the project and the env is declared as a source: "
                    '[tool.kernodeck.application.data.NAME] path = "${VAR}/..." (or url, hf; docs/application.md)')
    if any(f["declare"] == "modules cache" for f in files):
        said.append("a file in the Hugging Face modules cache (HF_MODULES_CACHE: a trust_remote_code model's code "
                    "copied by transformers) counts only as the copy of a declared file, by its bytes, unchanged "
                    "since read, and every compile of it those bytes (or an empty __init__.py): declare the model's "
                    "code (code, or the weights source holding it), or remove the stale copy")
    for source in sorted({f["source"] for f in files if f["declare"] == SOURCE}):
        ours = [f for f in files if f["declare"] == SOURCE and f["source"] == source]
        names = json_list([f["name"] for f in ours])
        said.append(f"add {names} to [tool.kernodeck.application.{source}] files (globs accepted; the snapshot's "
                    "files those globs leave out are no part of what the reference pinned), or remove them from the "
                    "Hugging Face cache if the application should not read them" if ours[0]["kind"] == "hf" else
                    f"{names} of the {source} source are left out of its fingerprint (.gitattributes, __pycache__): "
                    "remove them from its folder, or read the source's own files")
    if any(f["declare"] == RUN_RECORD for f in files):
        said.append("of this run's own folder, a call of the resume check reads only what it is handed (the resumed "
                    "run: its checkpoint, resume_from) and what it wrote itself, never another call's record "
                    "(docs/application.md: the resume contract)")
    return "; ".join(said)


def tip(files: list[dict[str, str]]) -> str:
    """The verdict's next command: a new reference once declared; for a source's files alone, as :func:`advice` says
    per kind (red-team pass 58, HUB2): an hf snapshot's once added to its files (or removed), another source's (whose
    fingerprint leaves such files out by rule, so a new reference would too) once removed."""
    if not files or not all(f["declare"] == SOURCE for f in files):
        return TIP
    return TIP_SOURCE if any(f.get("kind") == "hf" for f in files) else TIP_LEFT_OUT
