"""What a closed-world verdict advises for each file it names (world.py judges; this says what to declare).

A file's ``declare`` says where it belongs: ``code`` (Python and compiled modules of the project), ``files`` (anything
else in the project), ``outside the project`` (a ``data.NAME`` source), ``modules cache`` (a model's code copied by
transformers) or ``run record`` (a file of this run's own folder that this call may not read: another call's record).
"""

from __future__ import annotations

TIP = "nox -s reference -- --new   (once declared; if one holds results of an earlier run, remove the cache instead)"
RUN_RECORD = "run record"


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
    if any(f["declare"] == RUN_RECORD for f in files):
        said.append("of this run's own folder, a call of the resume check reads only what it is handed (the resumed "
                    "run: its checkpoint, resume_from) and what it wrote itself, never another call's record "
                    "(docs/application.md: the resume contract)")
    return "; ".join(said)
