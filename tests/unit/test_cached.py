"""The application step refuses an output that is the content of a declared file the entry read (inenv/cached.py).

A cache of earlier outputs, declared as the closed world's TIP asks, passed every step while the model never ran
(red-team pass 13, HOLE 2). In-process through the closed-world harness and the stand-in torch, as the application
step runs the entry (application.run_entry); each refusal beside a control that computes its outputs and passes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.project import app_contract
from tests.helpers.closedworld import _script, _settings_project

ENTRY_STEP = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import application, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
sys.path.insert(0, sys.argv[4])  # the stand-in torch (settings.apply seeds and pins it before the entry)
try:
    world.forget()
    details = application.run_entry(ctx)  # the application step
    world.settle()
    print(json.dumps({"status": "passed", "written": details["written"]}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""

IDS = ["a", "bb", "ccc"]

# research code's "load the outputs if they were computed before"; ``LOAD`` is how the cache is read
ENTRY = '''import numpy as np
from pathlib import Path

ROOT = Path(__file__).resolve().parent
{top}

def model(records):
    return np.array([len(r["id"]) * 7 for r in records], dtype=np.int64)   # the model


def run(app):
    ids = [r["id"] for r in app.records]
    x = {load}
    app.write("x", x, ids)


def criterion(outputs, ids, records, params):
    return {{"passed": True, "summary": "ok"}}
'''


def _step(tmp_path: Path, load: str, cache: dict[str, Any], top: str = "") -> dict[str, Any]:
    """The application step on a project whose entry computes ``x`` as ``load`` says, ``cache`` (name -> array or
    arrays) saved under cache/ and declared (``files = ["cache/*"]``)."""
    config, fake = _settings_project(tmp_path)
    root = Path(config["project_root"])
    (root / "app.py").write_text(ENTRY.format(load=load, top=top), encoding="utf-8")
    (root / "sample.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in IDS), encoding="utf-8")
    (root / "cache").mkdir()
    (root / "cache" / "keep.txt").write_text("the cache folder\n", encoding="utf-8")
    for name, arrays in cache.items():
        if name.endswith(".npz"):
            np.savez(root / "cache" / name, **arrays)
        else:
            np.save(root / "cache" / name, arrays)
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": ["data/*.csv", "cache/*"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    done = _script(tmp_path, config, ENTRY_STEP, flags=[str(fake)])
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


COMPUTED = np.array([7, 14, 21], dtype=np.int64)  # what model() gives for IDS


@pytest.mark.parametrize(("load", "cache", "top", "file"), [
    # the red team's case: the output's .npy is the cache's bytes
    ("np.load(ROOT / 'cache' / 'x.npy')", {"x.npy": COMPUTED}, "", "cache/x.npy"),
    # other bytes, the same array: an .npz under another name, or a .npy of another dtype cast back
    ("np.load(ROOT / 'cache' / 'all.npz')['emb']", {"all.npz": {"other": np.zeros(2), "emb": COMPUTED}}, "",
     "cache/all.npz"),
    ("np.load(ROOT / 'cache' / 'x.npy').astype(np.int64)", {"x.npy": COMPUTED.astype(np.float64)}, "", "cache/x.npy"),
    # the same rows in another order (a cache kept by id, reordered to the sample's)
    ("np.load(ROOT / 'cache' / 'x.npy')[[2, 0, 1]]", {"x.npy": COMPUTED[[1, 2, 0]]}, "", "cache/x.npy"),
    # read when the entry's file is loaded (its top level), returned by the call
    ("CACHE", {"x.npy": COMPUTED}, "CACHE = np.load(ROOT / 'cache' / 'x.npy')", "cache/x.npy"),
], ids=["bytes", "npz", "cast", "rows-reordered", "at-load"])
def test_an_output_that_is_a_declared_files_content_fails_the_step(
        tmp_path: Path, load: str, cache: dict[str, Any], top: str, file: str) -> None:
    result = _step(tmp_path, load, cache, top)
    assert result["status"] == "failed", result
    assert result["error"].startswith(f"the output x is the content of {file}, a declared file the entry read: "
                                      "outputs must be computed in this run"), result


@pytest.mark.parametrize("load", [
    "model(app.records)",  # the model runs; the cache is there, unread
    "np.load(ROOT / 'cache' / 'x.npy') * 0 + model(app.records) + 1",  # a declared array read, outputs computed from it
    "model(app.records)[[0, 1, 1]]",  # rows of the declared array, not all of them
], ids=["unread", "computed-from-it", "some-rows"])
def test_an_entry_that_computes_its_outputs_passes(tmp_path: Path, load: str) -> None:
    assert _step(tmp_path, load, {"x.npy": COMPUTED}) == {"status": "passed", "written": ["outputs/x.npy"]}
