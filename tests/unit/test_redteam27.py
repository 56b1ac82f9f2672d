"""Red-team pass 27 (6df1eef: one step rule for every in-env step loop, steprun.py; a source's links taken as it is
fingerprinted, links.met; sources and the cache absolute): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands (a plain test once fixed), beside a control that passes today (notes:
/work/notes/redteam27.md). Fixed: FF1 (the order hands the runner's located sources and their links to the resumed
run's process: application.located, application.adopt), FF2 (one accessor of the criterion for every caller,
application.criterion_function, handing ``data=`` where it takes it). NOTE1, fixed later: the new process holds its
call by steprun.held against the runner's settings record and libraries (tests/unit/test_resume_calls.py).

FF1 (a second Context, FALSE FAILURE): the application resume's worker (resume_app._serve) builds its own Context
from the order, ``{project_root, application}`` only: the weights and data sources the runner located and
fingerprinted (ctx.state ``weights``, ``data``, their fingerprints, their links) are not handed on, and the worker
never locates them. Its closed world then knows only ``code``, ``files`` and the sample: a ``train`` that reads a
declared ``data.NAME`` source (its training set) or the declared ``weights`` (a fine-tune from a pretrained hf
snapshot) passes the runner's two calls (uninterrupted, to the checkpoint) and is refused in the resumed run ("the
resume entry read files that are not declared sources"): the resume-application step fails on a plain project. The
same call with the runner's Context passes (the control). The class: every in-env Context but the runner's and a
variation's starts without the run's located sources (and their links: links.HELD is per Context).
FF2 (with_data not everywhere, FALSE RECORD/FAILURE): calibrate's margin search (margin.margins) calls the criterion
through application._function without application.with_data: a criterion that takes ``data=`` (documented: it is
handed ``app.data``) raises TypeError at every call, which margin_of counts as a rejection: the record says "the
reference outputs themselves fail this test" of a criterion verify's criterion step passes on the same outputs, and
the proposal falls back to the stand-in (or to no margin). A criterion with ``data=None`` as default is worse: the
margin is measured on another criterion than verify judges with. A criterion of four arguments reading the same
labels from a declared ``files`` file is searched (the control).
NOTE1 (fixed later; tests/unit/test_resume_calls.py): the resume worker's step is held for its sources only
(world.sources_held), not by steprun.held:
no libraries.check (a library the worker maps from outside the env) and no settings.not_in_effect against the
runner's record (the worker has none: settings_held compares each call with itself; apply_settings compares only
what settings.apply sets, not ``torch.num_threads``/``num_interop_threads``, which settings.json records).
Held (run here): the runner's and calibrate's step loops share steprun.run, and a step that failed keeps its first
error (no hold after it); the determinism reruns and the criterion's controls run inside steps; the margin search
is a step of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers.closedworld import APP, _script, declared_project

OUTPUT = {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}


def _project(tmp_path: Path, app_tail: str, table_extra: dict[str, Any], outputs: dict[str, Any] | None = None,
             head: str | None = None, files: dict[str, str] | None = None) -> tuple[dict[str, Any], Path]:
    """The closed project, app.py with ``app_tail`` appended (``head``: replacing its criterion and what follows),
    more ``files`` written, declaring ``table_extra``; (its run config, the stand-in torch's folder)."""
    text = APP if head is None else APP.split("def criterion")[0] + head
    return declared_project(tmp_path, text + app_tail, table_extra, files, outputs or OUTPUT)


def _last(done: Any) -> dict[str, Any]:
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- FF1: the resume worker's Context knows no weights or data source ----------------------------------------------

# One call of the application's train as resume_app runs it: with the runner's Context (its sources located at the
# application step) or with the Context resume_app._serve builds from its order.
TRAIN_CALL = r"""
import json, os, runpy, sys
os.environ["KERNODECK_CACHE"] = sys.argv[5]
from pathlib import Path
runpy.run_path(sys.argv[1])
sys.path.insert(0, sys.argv[4])  # the stand-in torch
from kernodeck_inenv import application, resume_app, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
out, mode = Path(sys.argv[3]), sys.argv[6]
cfg = {"entry": {"file": "app.py", "function": "train"}, "steps": 2, "checkpoint_at": 1,
       "outputs": {"w": {"kind": "exact", "dtype": "int64", "justification": "the count"}}}
checkpoint = out / "checkpoint"
checkpoint.mkdir(exist_ok=True)
(checkpoint / "state.txt").write_text("1")
if mode == "runner":  # the runner's: the application step located the sources
    ctx = Context(config=config, out=out)
    application.weights(ctx), application.data(ctx)
else:  # as resume_app._serve builds it from its order: the runner's located sources (resume_app.check) adopted
    runner = Context(config=config, out=out)
    application.weights(runner), application.data(runner)
    sources = json.loads(json.dumps(application.located(runner))) if mode == "worker" else {}
    ctx = Context(config={"project_root": config["project_root"], "application": config["application"]}, out=out)
    application.adopt(ctx, sources)
try:
    world.forget()
    resume_app.call_train(cfg, ctx, {"data": config["data_path"]}, "cpu", out / mode, 2, None,
                          checkpoint if mode != "runner" else None, None)
    world.settle()
    world.sources_held(ctx)
    print(json.dumps({"status": "passed"}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""

TRAIN = '''

def train(app, steps, save_at, resume_from):
    from pathlib import Path
    count = len((Path(app.params["data"]) / "0.csv").read_bytes())  # its training set: a declared data source
    start = int((Path(resume_from) / "state.txt").read_text()) if resume_from is not None else 0
    for step in range(start + 1, steps + 1):
        app.log(step, 0.5)
    app.write("w", [count])
    return {"step": steps, "epoch": 0, "loader": 0}
'''


def _train_call(tmp_path: Path, mode: str) -> dict[str, Any]:
    source = tmp_path / "datasets" / "train"
    source.mkdir(parents=True)
    (source / "0.csv").write_text("1\n")
    config, fake = _project(tmp_path, TRAIN, {"data": {"train": {"path": str(source)}}})
    config["data_path"] = str(source)
    return _last(_script(tmp_path, config, TRAIN_CALL, flags=[str(fake), str(tmp_path / "cache"), mode]))


def test_ff1_control_the_runners_call_of_train_reads_its_data_source(tmp_path: Path) -> None:
    result = _train_call(tmp_path, "runner")
    assert result["status"] == "passed", result


def test_ff1_the_resumed_run_reads_the_same_declared_data_source(tmp_path: Path) -> None:
    result = _train_call(tmp_path, "worker")
    assert result["status"] == "passed", result


def test_ff1_control_without_the_runners_sources_the_resumed_run_is_refused(tmp_path: Path) -> None:
    """The mechanism: a worker's Context given no sources (the order before the fix) knows none."""
    result = _train_call(tmp_path, "bare")
    assert result["status"] == "failed" and "not declared sources" in result["error"], result


# --- FF2: calibrate's margin search calls the criterion without data= -----------------------------------------------

MARGIN = r"""
import json, os, runpy, sys
os.environ["KERNODECK_CACHE"] = sys.argv[5]
from pathlib import Path
runpy.run_path(sys.argv[1])
sys.path.insert(0, sys.argv[4])
import numpy as np
from kernodeck_inenv import application, margin, world
from kernodeck_inenv._common import Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
application.data(ctx)  # located at the variation's application step
reference = np.array([[0.9, 0.1], [0.2, 0.8]], dtype=np.float32)
ctx.state["reference"] = {"x": reference}
world.forget()
found = margin.margins(ctx)["outputs"]["x"]  # calibrate's margin step
world.settle()
criterion = application.with_data(application._function(ctx, config["application"]["criterion"], "criterion"), ctx)
verdict = application._judge(criterion, {"x": reference}, [{"id": "a"}, {"id": "b"}], {}, Path(config["project_root"]))
print(json.dumps({"test": found.get("test"), "found": found.get("found"), "why": found.get("why"),
                  "verify_passes_the_reference": verdict.get("passed")}))
"""

# The criterion: every row's top-1 column is its label (the labels: a declared data source, or a declared file).
CRITERION = '''
def criterion(outputs, ids, records, params{extra}):
    import numpy as np
    labels = [int(v) for v in ({where} / "labels.txt").read_text().split()]
    accuracy = float((np.asarray(outputs["x"]).argmax(1) == np.array(labels)).mean())
    return {{"passed": accuracy >= 1.0, "summary": f"accuracy {{accuracy}}"}}
'''


def _margin(tmp_path: Path, with_data: bool) -> dict[str, Any]:
    source = tmp_path / "datasets" / "labels"
    source.mkdir(parents=True)
    (source / "labels.txt").write_text("0 1\n")
    outputs = {"x": {"kind": "allclose", "dtype": "float32", "rtol": 0, "atol": 1e-6, "justification": "scores"}}
    if with_data:
        head = CRITERION.format(extra=", data", where='data["labels"]')
        extra: dict[str, Any] = {"data": {"labels": {"path": str(source)}}}
    else:  # the same labels, a declared file of the project
        head = CRITERION.format(extra="", where="ROOT / 'data'")
        extra = {"files": ["data/*.txt"]}
    config, fake = _project(tmp_path, "", extra, outputs=outputs, head=head,
                            files={"data/labels.txt": "0 1\n", "sample.jsonl": '{"id": "a"}\n{"id": "b"}\n'})
    return _last(_script(tmp_path, config, MARGIN, flags=[str(fake), str(tmp_path / "cache")]))


def test_ff2_control_a_criterion_of_four_arguments_is_searched(tmp_path: Path) -> None:
    result = _margin(tmp_path, with_data=False)
    assert result["verify_passes_the_reference"] is True, result
    assert "the application's criterion" in str(result["test"]), result
    assert "themselves fail" not in str(result["why"]), result  # the criterion reached its search


def test_ff2_a_criterion_taking_data_is_searched(tmp_path: Path) -> None:
    result = _margin(tmp_path, with_data=True)
    assert result["verify_passes_the_reference"] is True, result
    assert "the application's criterion" in str(result["test"]), result
    assert "themselves fail" not in str(result["why"]), result  # the criterion reached its search
