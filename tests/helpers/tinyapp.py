"""Another application than the project's own: a tiny one, declared and referenced in a copy of the project.

Its verify costs about 9 CPU-s against MiniLM's 13 (idle; twice that on a loaded 2-core machine): no
sentence-transformers import, no model. The tests whose subject is Kernodeck's own machinery (a bad output at the
reread step, a reference's identity, a dropped check) run it instead of MiniLM, on a copy of one project referenced
once for the whole run (``tiny_referenced`` in tests/conftest.py, :func:`referenced` and :func:`copy_referenced`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.helpers.builtenv import sibling
from tests.helpers.project import kd

TINY_APP = '''
import numpy as np


def run(app):
    import torch

    x = torch.tensor([[r["a"], r["b"]] for r in app.records], dtype=torch.float32, device=app.device)
    w = torch.tensor(app.params["weights"], dtype=torch.float32, device=app.device)
    logits = (x @ w).cpu().numpy()
    ids = [r["id"] for r in app.records]
    app.progress(len(ids), len(ids), "records")
    app.write("logits", logits, ids)
    app.write("labels", logits.argmax(axis=1).astype(np.int64), ids)


def criterion(outputs, ids, records, params):
    share = float(np.mean(outputs["labels"] == np.array([r["label"] for r in records])))
    return {"passed": share >= params["min-accuracy"], "summary": f"accuracy {share:.2f}", "margin": share - 0.5}
'''


TINY_DECLARATION = """[tool.kernodeck.application]
entry = "tiny/app.py:run"
criterion = "tiny/app.py:criterion"
sample = "tiny/sample.jsonl"
code = ["tiny/app.py"]
params = { weights = [[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], min-accuracy = 0.75 }

[tool.kernodeck.application.outputs.logits]
kind = "allclose"
dtype = "float32"
rtol = 1e-5
atol = 1e-6
justification = "float32 logits of one small matmul: only rounding may differ"

[tool.kernodeck.application.outputs.labels]
kind = "agreement"
dtype = "int64"
min-share = 1.0
justification = "labels decide the business outcome: every one must agree"

"""


def tiny_app_project(built: Path, tmp_path: Path) -> Path:
    """A sibling of the built project (its env shared) declaring the tiny application."""
    return declare(sibling(built, tmp_path))


def declare(project: Path) -> Path:
    """The tiny application written into a copy of the project and declared in its pyproject (in place of MiniLM)."""
    (project / "tiny").mkdir()
    (project / "tiny/app.py").write_text(TINY_APP)
    rows = [(1.0, 0.5), (-1.0, 2.0), (0.5, -0.5), (2.0, 2.0), (-2.0, -1.0), (0.0, 1.0), (1.5, -2.0), (-0.5, 0.25)]
    weights = [[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]]
    lines = []
    for i, (a, b) in enumerate(rows):
        logits = [a * weights[0][k] + b * weights[1][k] for k in range(3)]
        label = max(range(3), key=lambda k: logits[k])
        label = (label + 1) % 3 if i == 3 else label  # one wrong label: accuracy 7/8
        lines.append(json.dumps({"id": f"t{i}", "a": a, "b": b, "label": label}))
    (project / "tiny/sample.jsonl").write_text("\n".join(lines) + "\n")
    text = (project / "pyproject.toml").read_text()
    start, end = text.index("[tool.kernodeck.application]"), text.index("# The resume exercise")
    (project / "pyproject.toml").write_text(text[:start] + TINY_DECLARATION + text[end:])
    return project


def referenced(built: Path, folder: Path) -> Path:
    """:func:`tiny_app_project` with its own reference made (``reference --new``), for :func:`copy_referenced`."""
    project = tiny_app_project(built, folder)
    proc = kd(project, "reference", "--new", "--out", str(reference_run(project)))
    if proc.returncode != 0:
        raise RuntimeError(f"the tiny application's reference failed:\n{proc.stderr[-3000:]}")
    return project


def reference_run(project: Path) -> Path:
    """The dossier of the passing ``reference --new`` run that made :func:`referenced`'s reference (beside the
    project, never changed: a reader that needs an earlier passing dossier of the tiny application copies it)."""
    return project.parent / "ref"


def copy_referenced(project: Path, tmp_path: Path) -> Path:
    """A test's own copy of the referenced tiny project (its env still the built one's, through the same link)."""
    return Path(shutil.copytree(project, tmp_path / "project", symlinks=True,
                                ignore=shutil.ignore_patterns("runs", "__pycache__")))
