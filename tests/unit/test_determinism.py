"""The determinism step's reruns recompute the outputs (kernodeck/inenv/determinism.py; the seventh red-team pass of
issue 29, /work/notes/redteam7.md section 5).

The reruns call the entry again in the same process. An entry that memoises its outputs (a module global, an
``lru_cache``, a module of the project, a cache file) handed back the first call's arrays, and the step said "bitwise
identical" of a computation that is not. Each entry here draws from an unseeded generator, so only a rerun that
recomputes can tell: the step must fail, by the difference between the runs or by refusing the cache's read. The
stand-in torch is test_verified's FAKE_TORCH; the process is started as kernodeck/env/start.py starts the runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernodeck.project import app_contract
from tests.helpers.builtenv import env_python
from tests.helpers.closedworld import FAKE_TORCH, INENV, _closed_project

HARNESS = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
sys.path.insert(0, sys.argv[4])  # the fake torch (test_verified.FAKE_TORCH)
from kernodeck_inenv import application, determinism, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
try:
    first = application._call_entry(ctx, application.sample(ctx), None)
    ctx.state["first_run"] = {n: a for n, (a, _) in first.written.items()}
    before = {n: id(m) for n, m in sys.modules.items() if n.startswith(("kernodeck_app_", "mypkg"))}
    details = determinism.run(ctx)
    world.settle()
    after = {n: id(m) for n, m in sys.modules.items() if n.startswith(("kernodeck_app_", "mypkg"))}
    print(json.dumps({"status": "passed", "bitwise_identical": details["bitwise_identical"],
                      "modules_kept": before == after,
                      "cost": sorted(k for k in ("cost_ratio", "seconds_without_settings", "settings_cost")
                                     if k in details),
                      "without_settings": sorted(n for n, o in details["outputs"].items()
                                                 if "max_abs_without_settings" in o)}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""

DRAW = "np.random.default_rng().integers(0, 1 << 40, size=len(key))"  # unseeded: differs on every call
ENTRIES = {  # each keeps the first call's outputs for the same records
    "a dict in the entry's module": f"""
_SEEN = {{}}
def run(app):
    key = tuple(r["id"] for r in app.records)
    if key not in _SEEN:
        _SEEN[key] = {DRAW}
    app.write("x", _SEEN[key], list(key))
""",
    "an lru_cache in the entry's module": f"""
import functools
@functools.lru_cache(maxsize=None)
def _outputs(key):
    return {DRAW}
def run(app):
    key = tuple(r["id"] for r in app.records)
    app.write("x", _outputs(key), list(key))
""",
    "a dict in a module of the project": f"""
sys.path.insert(0, str(ROOT / "src"))
import mypkg.memo
def run(app):
    key = tuple(r["id"] for r in app.records)
    if key not in mypkg.memo.SEEN:
        mypkg.memo.SEEN[key] = {DRAW}
    app.write("x", mypkg.memo.SEEN[key], list(key))
""",
    "a dict handed in the params": f"""
def run(app):
    key = tuple(r["id"] for r in app.records)
    memo = app.params["memo"]
    if str(key) not in memo:
        memo[str(key)] = {DRAW}
    app.write("x", memo[str(key)], list(key))
""",
}
CACHE_FILE = f"""
def run(app):
    key = tuple(r["id"] for r in app.records)
    cache = Path("cache-" + str(len(key)) + ".npy")  # in the working folder: the run's
    if not cache.exists():
        np.save(cache, {DRAW})
    app.write("x", np.load(cache), list(key))
"""
RENAMED_CACHE = f"""
import os
def run(app):
    key = tuple(r["id"] for r in app.records)
    cache, moved = Path("cache-" + str(len(key)) + ".npy"), Path("moved-" + str(len(key)) + ".npy")
    if not cache.exists() and not moved.exists():
        np.save(cache, {DRAW})
        os.link(cache, moved)  # a second name, made by the first call
    app.write("x", np.load(moved), list(key))
"""
# the controls, on both codes: recomputed without a memo (the runs differ); seeded, with a file written and read back
# within one call and a module-level table (passes)
RECOMPUTED = f"""
def run(app):
    key = tuple(r["id"] for r in app.records)
    app.write("x", {DRAW}, list(key))
"""
SEEDED = """
TABLE = np.arange(1000)
def run(app):
    key = tuple(r["id"] for r in app.records)
    scratch = Path("scratch.npy")
    np.save(scratch, np.random.default_rng(7).integers(0, 1 << 40, size=len(key)) + TABLE[:len(key)])
    app.write("x", np.load(scratch), list(key))
"""


def _determinism(tmp_path: Path, entry: str, params: dict[str, Any] | None = None, limit: int = 64, *,
                 settings_cost: bool = False) -> dict[str, Any]:
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"], files=["data/*.csv"])
    root = Path(config["project_root"])
    (root / "sample.jsonl").write_text("".join(f'{{"id": "r{i}"}}\n' for i in range(4)))
    (root / "src" / "mypkg" / "memo.py").write_text("SEEN = {}\n")
    (root / "app.py").write_text("import sys\nfrom pathlib import Path\n\nimport numpy as np\n\n"
                                 "ROOT = Path(__file__).resolve().parent\n" + entry +
                                 "\n\ndef criterion(o, i, r, p):\n    return {'passed': True, 'summary': ''}\n")
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/*.py"], "files": ["data/*.csv"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    config["application"]["params"] = params or {}
    config["determinism_records"] = limit  # below 4: the reruns take the first records, the first run is not compared
    config["settings_cost"] = settings_cost  # a reference's run, or verify --settings-cost
    fake = tmp_path / "faketorch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "det.py").write_text(HARNESS)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON"))},
           "PYTHONHASHSEED": "0"}  # started as kernodeck/env/start.py starts the runner (-s -P, the seed in effect)
    done = subprocess.run([sys.executable, "-s", "-P", str(tmp_path / "det.py"), str(INENV / "_package.py"),
                           str(tmp_path / "config.json"), str(tmp_path / "out"), str(fake)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("limit", [64, 2], ids=["the whole sample", "a subset"])
@pytest.mark.parametrize("memo", sorted(ENTRIES))
def test_a_memo_of_the_first_calls_outputs_does_not_pass_for_a_repeat(tmp_path: Path, memo: str, limit: int) -> None:
    """Before: "passed", bitwise identical. Now the first rerun loads the project's code afresh, and every call is
    handed copies. On a subset the first run is not among the runs compared: the memo is then the first rerun's."""
    result = _determinism(tmp_path, ENTRIES[memo], params={"memo": {}}, limit=limit)
    assert result["status"] == "failed", result
    assert "runs of the entry on CPU in one process differ (x)" in result["error"], result


def test_a_cache_file_the_first_call_wrote_is_refused_in_a_rerun(tmp_path: Path) -> None:
    """Before: "passed" (the working folder is the run's, its files the application's own). Its earlier results are
    inputs of a rerun: the read is refused, naming the file."""
    result = _determinism(tmp_path, CACHE_FILE)
    assert result["status"] == "failed", result
    assert result["error"].startswith("the entry read "), result
    assert "cache-4.npy where it must compute afresh (a determinism rerun" in result["error"]


def test_a_cache_file_read_through_another_name_is_refused_in_a_rerun(tmp_path: Path) -> None:
    """Ninth red-team pass: the earlier files were known by name, so a cache read through a hard link (or renamed)
    passed; they are known by the file (inode, device) too."""
    result = _determinism(tmp_path, RENAMED_CACHE)
    assert result["status"] == "failed", result
    assert "where it must compute afresh (a determinism rerun" in result["error"], result


def test_controls_an_entry_that_recomputes_fails_and_a_seeded_one_passes(tmp_path: Path) -> None:
    assert "runs of the entry on CPU in one process differ (x)" in _determinism(tmp_path / "a", RECOMPUTED)["error"]
    # a file written and read back within one call is the call's own; after the step, the first run's modules are
    # the ones loaded (the steps after it see what the application step loaded)
    assert _determinism(tmp_path / "b", SEEDED) == {"status": "passed", "bitwise_identical": True,
                                                    "modules_kept": True, "cost": ["settings_cost"],
                                                    "without_settings": []}


def test_the_run_without_the_settings_is_made_only_where_its_cost_is_asked(tmp_path: Path) -> None:
    """A reference's run and ``verify -- --settings-cost`` (``settings_cost`` in the run's configuration) time the
    entry once more without the settings and record the cost and each output's difference without them; any other
    verify says where the cost is measured instead, and runs the entry twice more only."""
    asked = _determinism(tmp_path / "asked", SEEDED, settings_cost=True)
    assert asked["cost"] == ["cost_ratio", "seconds_without_settings"] and asked["without_settings"] == ["x"], asked
    assert asked["status"] == "passed" and asked["modules_kept"] is True


# red-team pass 16 (moved from its reproduction file: they use this file's runner)
ENV = env_python(Path(__file__).resolve().parents[2])  # this checkout's rebuilt env, where there is one

# FP3 (determinism, FALSE PASS; class 2's "written by the application" as the reruns' bar): the reruns may not read a
# file the application wrote earlier in the run (owned.EARLIER), but "written" is known from audit events only. A memo
# written by torch.save(obj, "memo.pt") (an ASCII path: torch._C.PyTorchFileWriter writes it in C++, no event) and read
# back by torch.load in every later call passes the determinism step, "bitwise identical over 3 runs", for an entry
# whose every computation differs. Measured through real `reference -- --new` + `verify --no-rebuild` (notes): PASSED,
# rc 0; the same entry without the memo FAILS determinism ("runs of the entry on CPU in one process differ"), and the
# same memo written through Python's open is refused ("a file the application wrote earlier in this run"). Fixed:
# torch.save given a path reports an ``open(path, "w")`` (natives.py), and the memo is the application's, refused.

# the stand-in of torch.save's C++ writer, in the fake torch: the hook hears nothing of its write
NATIVE_SAVE = FAKE_TORCH + """

def save(obj, f, pickle_module=None, pickle_protocol=2):
    import numpy
    mine = sys.modules["kernodeck_inenv.seen"].MINE
    was, mine.quiet = getattr(mine, "quiet", False), True
    try:
        numpy.save(f, obj)
    finally:
        mine.quiet = was
"""
NATIVE_MEMO = f"""
def run(app):
    import torch
    key = tuple(r["id"] for r in app.records)
    cache = Path("out", "memo-" + str(len(key)) + ".npy")  # in the run's folder
    if not cache.exists():
        torch.save({DRAW}, str(cache))
    app.write("x", np.load(cache), list(key))
"""


def test_fp3_a_memo_a_native_writer_made_is_refused_in_a_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "FAKE_TORCH", NATIVE_SAVE)
    result = _determinism(tmp_path, NATIVE_MEMO)
    assert result["status"] == "failed" and "where it must compute afresh" in result["error"], result


def test_fp3_controls_the_same_memo_written_through_python_is_refused_and_without_it_the_runs_differ(
        tmp_path: Path) -> None:
    result = _determinism(tmp_path / "python", CACHE_FILE)
    assert result["status"] == "failed" and "where it must compute afresh" in result["error"], result
    result = _determinism(tmp_path / "none", RECOMPUTED)
    assert "runs of the entry on CPU in one process differ (x)" in result["error"], result


REAL_TORCH = """
import sys
sys.path.remove(sys.path[0])  # the stand-in's folder: the env's torch is found then
del sys.modules["torch"]
import torch as _real
sys.modules["torch"] = _real
"""
REAL_MEMO = f"""
import torch
def run(app):
    key = tuple(r["id"] for r in app.records)
    if not Path("out", "memo.pt").exists():
        torch.save(torch.from_numpy({DRAW}), "out/memo.pt")  # C++ writes it
    app.write("x", torch.load("out/memo.pt").numpy(), list(key))
"""


@pytest.mark.skipif(not ENV.exists(), reason="needs this checkout's rebuilt env (nox -s rebuild)")
def test_fp3_in_the_real_env_torch_save_memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "FAKE_TORCH", REAL_TORCH)  # hands over to the env's torch
    monkeypatch.setattr(sys, "executable", str(ENV))
    result = _determinism(tmp_path, REAL_MEMO)
    assert result["status"] == "failed" and "where it must compute afresh" in result["error"], result


def test_the_project_is_loaded_afresh_each_time_and_the_last_put_back_is_reused_only_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """determinism._afresh twice in a row (the criterion's first sight does it three times): each time the project's
    module leaves sys.modules for the rerun and the first run's is put back after; the second takes the modules the
    first put back without scanning sys.modules again, as nothing moved since. The control: a module added since (an
    import between the two) means a scan."""
    import types

    from kernodeck.inenv import determinism
    from kernodeck.inenv._common import Context

    scans: list[int] = []
    real = determinism._project_modules
    monkeypatch.setattr(determinism, "_project_modules", lambda ctx: scans.append(1) or real(ctx))
    monkeypatch.setattr(determinism, "_PUT_BACK", [])
    ctx = Context(config={"project_root": str(tmp_path)}, out=tmp_path)
    first = types.ModuleType("kernodeck_test_project")
    first.__file__ = str(tmp_path / "kernodeck_test_project.py")
    monkeypatch.setitem(sys.modules, "kernodeck_test_project", first)
    for _ in range(2):
        with determinism._afresh(ctx):
            assert "kernodeck_test_project" not in sys.modules
            again = types.ModuleType("kernodeck_test_project")
            again.__file__ = first.__file__
            sys.modules["kernodeck_test_project"] = again  # what the rerun loads from the project's bytes
        assert sys.modules["kernodeck_test_project"] is first
    assert len(scans) == 3, scans  # the first: before and after; the second: after only
    monkeypatch.setitem(sys.modules, "kernodeck_test_other", types.ModuleType("kernodeck_test_other"))
    with determinism._afresh(ctx):
        assert "kernodeck_test_project" not in sys.modules
    assert sys.modules["kernodeck_test_project"] is first and len(scans) == 5, scans
