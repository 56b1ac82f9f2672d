"""Red-team pass 18 (issue 29's classes, after pass 17's fixes): each finding reproduced, marked
``xfail(strict=True)`` with its id while it stands (a plain test once fixed), beside a control that passes today
(notes: /work/notes/redteam18.md).

FP1 (closed world, FALSE PASS): scipy's Matrix Market reader (``scipy.io.mmread``, ``scipy.io.mminfo``: C++
fast_matrix_market given a path, ``_fmm_core.open_read_file``) and ``torch.jit.mobile._backport_for_mobile_to_buffer``
(C++ given a path) read an undeclared file unseen; natives.NATIVES has no row for them and docs/application.md's
limits do not name them (``np.loadtxt`` of the same file is named: the control).
FF2 (closed world, FALSE FAILURE): scipy's Matrix Market writer (``scipy.io.mmwrite``, C++ ``open_write_file``)
writes unseen: the file it made, read back, is judged an undeclared input.
FP3 (natives' wrappers, FALSE PASS): a wrapper judges its own reading of the file argument and leaves the original
reachable: ``torch.jit.load.__wrapped__`` (functools.wraps) loads an undeclared model unseen, and a path-like object
whose ``__fspath__`` names a declared file to the wrapper's audit event and an undeclared one to the native loader
has the undeclared one read.
FP4 (determinism and first sight, FALSE PASS): a write that is announced but replaces nothing still lifts the bar on
a file the application wrote earlier (seen._will_write at the audit event; pass 17's FP3 class, closed for ``"x"``
only): ``os.replace(memo, memo)`` (renamed onto itself) or ``open(memo, "wb", opener=...)`` whose opener opens it
read-only, then the memo read: an unseeded entry passes the reruns "bitwise identical", and a criterion keeping the
first outputs it sees on disk is accepted as able to fail.
FP5 (the criterion's power, FALSE PASS): every corruption shown to the criterion changes every row (a derangement,
noise in place of every row), so a criterion that checks one row of 8 against the truth fails every draw and the
first sight, and is accepted as able to fail: a model wrong on the 7 other rows passes the criterion step.
FP6 (the criterion's first sight, FALSE PASS): the first sight is told from the real call: a memo criterion (pass 10's,
in a module global the afresh load empties) that answers "failed" whenever ``judge._afresh_answer`` is on its call
stack fails the first sight, keeps the real outputs as its truth and fails every control draw: accepted as able to fail
on a model wrong on every row.
NOTE6 (stated limit, FALSE PASS): a memo kept outside the project's code (numpy's namespace) survives the afresh
reload: the determinism reruns say "bitwise identical" of unseeded outputs, and a memo criterion is accepted.
NOTE7 (stated limit, FALSE PASS): a cache of the outputs in a form cached.py does not compare (raw bytes written by
``tofile`` and read by ``np.fromfile``, ``savetxt`` text, a transposed or flattened ``.npy``) passes the application
step.

Fixed since, their tests plain: FP5 (the criterion must fail half its rows wrong: power.halves), FP6 (the verdict
on the real outputs is the afresh call each first sight goes through), NOTE7 but for text (an output's raw bytes held
exactly by a declared file: cached._values_in); text caches stay a stated limit (strict xfail). FP1 and FF2 (rows
for scipy's Matrix Market core, the lite model's backport, torch._C's readers and writers under the rows, tokenizers'
train and save), FP3 (each file argument converted once and that path handed to the original; no ``__wrapped__``),
FP4 (the rerun bar decided at the read by what happened to the file: rewritten.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.project import app_contract
from tests.helpers.builtenv import env_python
from tests.helpers.closedworld import (
    CRITERION_APP_HEAD,
    CRITERION_STEP,
    IDS,
    INENV,
    TABLE,
    _closed_project,
    _python,
    _settings_project,
    cached_step,
    determinism_step,
    saved,
)
from tests.helpers.nativestandins import ENTRY

ROOT = Path(__file__).resolve().parents[2]
ENV = env_python(ROOT)
NEEDS_ENV = pytest.mark.skipif(not ENV.exists(), reason="needs this checkout's rebuilt env (nox -s rebuild)")
REAL_ENTRY = ENTRY.replace("sys.path.insert(0, sys.argv[4])\n", "", 1)  # the env's own torch


def _window(tmp_path: Path, doing: str, files: dict[str, bytes] | None = None) -> dict[str, Any]:
    """One window of the application step (the entry's call, then the verdict) in the env's interpreter, whose entry
    does ``doing``; ``files`` written into the project first (undeclared: only ``data/*.csv`` is declared)."""
    config, fake = _settings_project(tmp_path, entry=doing)
    root = Path(config["project_root"])
    for rel, content in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    config["application"]["sources"] = app_contract.from_table(TABLE, root).fingerprints(root)
    (tmp_path / "script.py").write_text(REAL_ENTRY)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir(exist_ok=True)
    done = _python(str(tmp_path / "script.py"), str(INENV / "_package.py"), str(tmp_path / "config.json"),
                   str(tmp_path / "out"), str(fake), "torch", cwd=tmp_path, python=ENV)
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- FP1, FF2, FP3: native readers and writers --------------------------------------------------------------------

# made outside any window, in the env: a sparse matrix in Matrix Market format, TorchScript models
MODELS = """
import sys, numpy as np, scipy.io, scipy.sparse, torch
from pathlib import Path
d = Path(sys.argv[1])
d.mkdir(parents=True, exist_ok=True)
scipy.io.mmwrite(str(d / "g.mtx"), scipy.sparse.coo_matrix(np.eye(3)))
m = torch.jit.script(torch.nn.Linear(2, 2))
torch.jit.save(m, str(d / "m.pt"))
m._save_for_lite_interpreter(str(d / "m.ptl"))
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("models")
    subprocess.run([str(ENV), "-I", "-c", MODELS, str(folder)], check=True, capture_output=True, timeout=300)
    return {f"models/{p.name}": p.read_bytes() for p in folder.iterdir()}


UNSEEN_READS = {
    "scipy.io.mmread": "import scipy.io; scipy.io.mmread(str(ROOT / 'models' / 'g.mtx'))",
    "scipy.io.mminfo": "import scipy.io; scipy.io.mminfo(str(ROOT / 'models' / 'g.mtx'))",
    "torch.jit.mobile._backport_for_mobile_to_buffer": (
        "import io, torch.jit.mobile as m; b = m._backport_for_mobile_to_buffer(str(ROOT / 'models' / 'm.ptl'), 7); "
        "m._load_for_lite_interpreter(io.BytesIO(b))"),
    # the class beyond the findings: the backport that writes a file, torch._C's readers called directly
    "torch.jit.mobile._backport_for_mobile": (
        "import os, tempfile, torch.jit.mobile as m; o = os.path.join(tempfile.mkdtemp(), 'b.ptl'); "
        "m._backport_for_mobile(str(ROOT / 'models' / 'm.ptl'), o, 7); m._load_for_lite_interpreter(o)"),
    "torch._C._load_for_lite_interpreter": (
        "import torch; torch._C._load_for_lite_interpreter(str(ROOT / 'models' / 'm.ptl'), None)"),
    "tokenizers.Tokenizer.train": (
        "from tokenizers import Tokenizer, models, trainers; t = Tokenizer(models.WordLevel(unk_token='[UNK]')); "
        "t.train([str(ROOT / 'models' / 'g.mtx')], trainers.WordLevelTrainer())"),
    "torch._C.import_ir_module": (
        "import torch; torch._C.import_ir_module(torch._C.CompilationUnit(), str(ROOT / 'models' / 'm.pt'), None, "
        "{}, False)"),
}


@NEEDS_ENV
def test_fp1_control_the_undeclared_matrix_read_by_numpy_is_named(tmp_path: Path, models: dict[str, bytes]) -> None:
    result = _window(tmp_path, "import numpy as np; np.loadtxt(str(ROOT / 'models' / 'g.mtx'), comments='%', "
                               "skiprows=2)", models)
    assert result["status"] == "failed" and "models/g.mtx" in result["error"], result


@NEEDS_ENV
@pytest.mark.parametrize("how", sorted(UNSEEN_READS))
def test_fp1_an_undeclared_file_read_by_another_public_native_reader_is_named(
        tmp_path: Path, models: dict[str, bytes], how: str) -> None:
    result = _window(tmp_path, UNSEEN_READS[how], models)
    assert result["status"] == "failed" and "models/" in result["error"], result


def _writes(tmp_path: Path, doing: str) -> dict[str, Any]:
    return _window(tmp_path, "import os, tempfile; d = tempfile.mkdtemp(); " + doing)


@NEEDS_ENV
def test_ff2_control_a_wrapped_native_writers_file_read_back_is_the_applications_own(tmp_path: Path) -> None:
    doing = ("torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), os.path.join(d, 'm.pt')); "
             "open(os.path.join(d, 'm.pt'), 'rb').read()")
    assert _writes(tmp_path, doing) == {"status": "passed"}


@NEEDS_ENV
@pytest.mark.parametrize("read", ["open(os.path.join(d, 'g.mtx')).read()", "scipy.io.mmread(os.path.join(d, 'g.mtx'))"])
def test_ff2_a_matrix_scipy_wrote_then_read_back_is_not_an_input(tmp_path: Path, read: str) -> None:
    doing = "import numpy as np, scipy.io; scipy.io.mmwrite(os.path.join(d, 'g'), np.eye(3)); " + read
    assert _writes(tmp_path, doing) == {"status": "passed"}


@NEEDS_ENV
def test_ff2_a_tokenizer_saved_then_loaded_back_is_the_applications_own(tmp_path: Path) -> None:
    doing = ("from tokenizers import Tokenizer, models; "
             "t = Tokenizer(models.WordLevel({'a': 0, '[UNK]': 1}, unk_token='[UNK]')); "
             "t.save(os.path.join(d, 't.json')); Tokenizer.from_file(os.path.join(d, 't.json'))")
    assert _writes(tmp_path, doing) == {"status": "passed"}


# a path-like object that names the declared data/extra.csv to the first os.fspath (the wrapper's audit event) and
# the undeclared model to every later one (the native loader's own conversion)
TWO_FACED = """import itertools
    class Path2:
        calls = itertools.count()

        def __fspath__(self):
            return str(ROOT / ('data/extra.csv' if next(self.calls) == 0 else 'models/m.pt'))
    torch.jit.load(Path2())"""
AROUND_THE_WRAPPER = {  # how the undeclared model is loaded around the wrapper, and why it is not (fixed)
    "the original under __wrapped__": ("torch.jit.load.__wrapped__(str(ROOT / 'models' / 'm.pt'))",
                                       "'function' object has no attribute '__wrapped__'"),
    # the path judged (the declared CSV) is the path the loader gets: it reads the CSV, no archive
    "a path-like naming another file on its second conversion": (TWO_FACED, "not a ZIP archive"),
}


@NEEDS_ENV
def test_fp3_control_an_undeclared_model_given_to_the_wrapped_loader_is_named(tmp_path: Path,
                                                                              models: dict[str, bytes]) -> None:
    result = _window(tmp_path, "torch.jit.load(str(ROOT / 'models' / 'm.pt'))", models)
    assert result["status"] == "failed" and "models/m.pt" in result["error"], result


@NEEDS_ENV
@pytest.mark.parametrize("how", sorted(AROUND_THE_WRAPPER))
def test_fp3_an_undeclared_model_cannot_be_loaded_around_the_wrapper(tmp_path: Path, models: dict[str, bytes],
                                                                     how: str) -> None:
    """Before the fix both loaded the undeclared model unseen (the window passed)."""
    doing, why = AROUND_THE_WRAPPER[how]
    result = _window(tmp_path, doing, models)
    assert result["status"] == "failed" and why in result["error"], result


@NEEDS_ENV
def test_fp3_a_native_writer_gets_the_path_it_reported(tmp_path: Path) -> None:
    """The writer's side of FP3: a path-like naming a temporary file to the report, the declared data/extra.csv
    to the writer, would overwrite a declared source unseen; converted once, the write lands where it was reported."""
    doing = ("import itertools, tempfile\n    class P:\n        calls = itertools.count()\n\n"
             "        def __fspath__(self):\n"
             "            return os.path.join(d, 'm.pt') if next(self.calls) == 0 else str(ROOT / 'data/extra.csv')\n"
             "    d = tempfile.mkdtemp()\n    torch.save({'a': 1}, P())\n"
             "    assert (ROOT / 'data/extra.csv').read_bytes() == b'label\\n1\\n', 'overwritten'\n"
             "    open(os.path.join(d, 'm.pt'), 'rb').read()")
    assert _window(tmp_path, "import os\n    " + doing) == {"status": "passed"}


# --- FP4, NOTE6: the determinism reruns ------------------------------------------------------------------------------

DRAW = "np.random.default_rng().integers(0, 1 << 40, size=len(key))"  # unseeded: differs on every call
ON_DISK = f"""
def run(app):
    key = tuple(r["id"] for r in app.records)
    memo = Path("out", "memo-" + str(len(key)) + ".npy")
    if not memo.exists():
        np.save(memo, {DRAW})
LIFT
    app.write("x", np.load(memo), list(key))
"""
OPENER = """    fds = []

    def opener(path, flags):  # announced as a write; opened to read, nothing written
        fds.append(os.open(path, os.O_RDONLY))
        return os.open(os.devnull, os.O_WRONLY)

    open(memo, "wb", opener=opener).close()
    memo = os.fdopen(fds[0], "rb")"""
LIFTS = {
    "the memo renamed onto itself": ON_DISK.replace("LIFT", "    os.replace(memo, memo)"),
    "an open announced as a write whose opener opens it to read": ON_DISK.replace("LIFT", OPENER),
    # the fix decides at the read by what happened: a write announced (the opener opens the null device), then the
    # memo's mtime moved by a touch: its state differs, its bytes are the earlier call's
    "an announced write, then a touch": ON_DISK.replace("LIFT", """\
    open(memo, "wb", opener=lambda path, flags: os.open(os.devnull, os.O_WRONLY)).close()
    os.utime(memo)"""),
}
# a memo rewritten in each call, as an artefact is written atomically (a new file moved onto the name) or in place:
# the rerun's own file, read back (seeded: every call computes the same)
REWRITES = {
    "moved onto the name": """
def run(app):
    key = tuple(r["id"] for r in app.records)
    memo = Path("out", "memo-" + str(len(key)) + ".npy")
    np.save(str(memo) + ".tmp.npy", np.random.default_rng(7).integers(0, 1 << 40, size=len(key)))
    os.replace(str(memo) + ".tmp.npy", memo)
    app.write("x", np.load(memo), list(key))
""",
    "truncated in place": """
def run(app):
    key = tuple(r["id"] for r in app.records)
    memo = Path("out", "memo-" + str(len(key)) + ".npy")
    with open(memo, "wb") as f:
        np.save(f, np.random.default_rng(7).integers(0, 1 << 40, size=len(key)))
    app.write("x", np.load(memo), list(key))
""",
}


@pytest.mark.parametrize("how", sorted(REWRITES))
def test_fp4_control_a_memo_the_rerun_rewrites_first_is_its_own(tmp_path: Path, how: str) -> None:
    assert determinism_step(tmp_path, REWRITES[how]) == {"status": "passed", "bitwise_identical": True}
IN_MEMORY = {
    "a module global": f"""
_MEMO = {{}}


def run(app):
    key = tuple(r["id"] for r in app.records)
    if key not in _MEMO:
        _MEMO[key] = {DRAW}
    app.write("x", _MEMO[key], list(key))
""",
    "numpy's namespace": f"""
def run(app):
    key = tuple(r["id"] for r in app.records)
    memo = np.__dict__.setdefault("_memo", {{}})
    if key not in memo:
        memo[key] = {DRAW}
    app.write("x", memo[key], list(key))
""",
}


def test_fp4_control_a_memo_on_disk_is_refused_in_a_rerun(tmp_path: Path) -> None:
    result = determinism_step(tmp_path, ON_DISK.replace("LIFT\n", ""))
    assert result["status"] == "failed" and "where it must compute afresh" in result["error"], result


@pytest.mark.parametrize("how", sorted(LIFTS))
def test_fp4_a_memo_on_disk_behind_a_write_that_replaces_nothing_is_refused(tmp_path: Path, how: str) -> None:
    result = determinism_step(tmp_path, LIFTS[how])
    assert result["status"] == "failed" and "where it must compute afresh" in result["error"], result


def test_note6_control_a_memo_in_a_module_global_is_not_a_repeat(tmp_path: Path) -> None:
    result = determinism_step(tmp_path, IN_MEMORY["a module global"])
    assert result["status"] == "failed" and "CPU runs must be bitwise identical" in result["error"], result


@pytest.mark.xfail(strict=True, reason="NOTE6 (stated limit): a memo outside the project's code survives the reload")
def test_note6_a_memo_in_a_librarys_namespace_is_not_a_repeat(tmp_path: Path) -> None:
    result = determinism_step(tmp_path, IN_MEMORY["numpy's namespace"])
    assert result["status"] == "failed" and "CPU runs must be bitwise identical" in result["error"], result


# --- FP4, FP5, NOTE6: the criterion's controls and first sight -------------------------------------------------------

TRUTH = """def criterion(outputs, ids, records, params):
    rows = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    truth = rows / np.linalg.norm(rows, axis=1, keepdims=True)  # what a right model gives
    x = outputs["x"]
    return {"passed": bool(np.allclose(x[:CHECKED], truth[:CHECKED], atol=1e-5)), "summary": f"{CHECKED} rows right"}
"""
DISK_MEMO = """def criterion(outputs, ids, records, params):
    x, memo = outputs["x"], Path("out", "truth.npy")
    if not memo.exists():
        np.save(memo, x)
    if LIFT:
        os.replace(memo, memo)
    return {"passed": bool(np.array_equal(np.load(memo), x)), "summary": "as first seen"}
"""
ENV_MEMO = """def criterion(outputs, ids, records, params):
    x = outputs["x"]
    truth = np.__dict__.setdefault("_first_seen", x.copy())
    return {"passed": bool(np.array_equal(truth, x)), "summary": "as first seen"}
"""


def _criterion_step(tmp_path: Path, source: str, right: int = 8) -> dict[str, Any]:
    """The criterion step (judge.criterion: the criterion, its controls, its first sight afresh, its margin) on 8 unit
    rows, the first ``right`` of them what a right model gives; the project's app.py ``source``."""
    config = _closed_project(tmp_path)
    root = Path(config["project_root"])
    (root / "app.py").write_text(CRITERION_APP_HEAD + source)
    (root / "sample.jsonl").write_text("".join(f'{{"id": "r{i}"}}\n' for i in range(8)))
    app = app_contract.from_table({**TABLE, "outputs": {"x": {"kind": "allclose", "dtype": "float32", "rtol": 1e-5,
                                                              "atol": 1e-6, "justification": "x"}}}, root)
    config["application"] = {**app.run_config(), "sample": str(root / "sample.jsonl"),
                             "sources": app.fingerprints(root)}
    (tmp_path / "step.py").write_text(CRITERION_STEP)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir(exist_ok=True)
    done = _python(str(tmp_path / "step.py"), str(INENV / "_package.py"), str(tmp_path / "config.json"),
                   str(tmp_path / "out"), str(right), cwd=tmp_path)
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_fp4_control_a_criterions_memo_on_disk_is_refused_at_its_first_sight(tmp_path: Path) -> None:
    result = _criterion_step(tmp_path, "LIFT = False\n" + DISK_MEMO)
    assert result["status"] == "failed" and "where it must compute afresh" in result["error"], result


def test_fp4_a_criterions_memo_renamed_onto_itself_is_refused_at_its_first_sight(tmp_path: Path) -> None:
    result = _criterion_step(tmp_path, "LIFT = True\n" + DISK_MEMO)
    assert result["status"] == "failed" and "where it must compute afresh" in result["error"], result


def test_fp5_control_a_criterion_checking_every_row_fails_a_model_wrong_on_seven(tmp_path: Path) -> None:
    assert _criterion_step(tmp_path, "CHECKED = 8\n" + TRUTH) == {"status": "passed", "able_to_fail": True}
    result = _criterion_step(tmp_path / "wrong", "CHECKED = 8\n" + TRUTH, right=1)
    assert result["status"] == "failed" and result["error"].startswith("criterion failed: 8 rows right"), result


def test_fp5_a_criterion_checking_one_row_of_eight_is_refused(tmp_path: Path) -> None:
    """What FP5 was: checking one row, it fails every draw of both required corruptions and its first sight; half the
    rows changed, the other half as they are, it passes the half that leaves its row alone."""
    result = _criterion_step(tmp_path, "CHECKED = 1\n" + TRUTH)
    assert result["status"] == "failed" and result["error"].startswith(
        "the criterion is unable to fail: it cannot see half its rows changed"), result
    assert "it does not judge" in result["error"], result


def test_fp5_a_model_wrong_on_seven_rows_of_eight_fails_the_criterion_step(tmp_path: Path) -> None:
    result = _criterion_step(tmp_path, "CHECKED = 1\n" + TRUTH, right=1)
    assert result["status"] == "failed", result


def test_note6_control_a_memo_criterion_in_a_module_global_is_refused_by_its_first_sight(tmp_path: Path) -> None:
    source = ENV_MEMO.replace('np.__dict__.setdefault("_first_seen", x.copy())', '_SEEN.setdefault("x", x.copy())')
    result = _criterion_step(tmp_path, "_SEEN = {}\n" + source)
    assert result["status"] == "failed" and "before any other outputs, it passed them" in result["error"], result


@pytest.mark.xfail(strict=True, reason="NOTE6 (stated limit): a memo outside the project's code survives the reload")
def test_note6_a_memo_criterion_in_a_librarys_namespace_is_refused(tmp_path: Path) -> None:
    result = _criterion_step(tmp_path, ENV_MEMO)
    assert result["status"] == "failed", result


# the memo of pass 10 (a module global, which the afresh load empties) that answers no whenever the call comes through
# the first sight's own function: the first sight is told from the real call by the stack
TELLS_FIRST_SIGHT = """import sys
_SEEN = {}


def criterion(outputs, ids, records, params):
    frame, names = sys._getframe(1), set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    if "_afresh_answer" in names:  # loaded afresh to be shown a corruption first: say no
        return {"passed": False, "summary": "no"}
    x = outputs["x"]
    return {"passed": bool(np.array_equal(_SEEN.setdefault("x", x.copy()), x)), "summary": "as first seen"}
"""


def test_fp6_a_memo_criterion_that_tells_the_first_sight_by_the_stack_is_refused(tmp_path: Path) -> None:
    result = _criterion_step(tmp_path, TELLS_FIRST_SIGHT, right=0)  # a model wrong on every row
    assert result["status"] == "failed" and result["error"].startswith(
        "the criterion is unable to fail: loaded afresh and shown this run's outputs, as it is shown each corruption "
        "first, it did not pass them (no)"), result


# --- NOTE7: caches cached.py does not compare -----------------------------------------------------------------------

COMPUTED = np.array([[len(i) * 0.37 + k * 1.1 for k in range(4)] for i in IDS], dtype=np.float32)


TEXT = "text (savetxt, np.loadtxt)"
CACHES = {  # how the cache is loaded, its file and its bytes: each the computed outputs
    "raw bytes (tofile, np.fromfile)": ("np.fromfile(ROOT / 'cache' / 'x.bin', dtype=np.float32).reshape(-1, 4)",
                                        "x.bin", COMPUTED.tobytes()),
    "text (savetxt, np.loadtxt)": ("np.loadtxt(ROOT / 'cache' / 'x.txt').astype(np.float32)", "x.txt",
                                   saved(np.savetxt, COMPUTED)),
    "a transposed .npy": ("np.load(ROOT / 'cache' / 'x.npy').T", "x.npy", saved(np.save, COMPUTED.T.copy())),
    "a flattened .npy": ("np.load(ROOT / 'cache' / 'x.npy').reshape(-1, 4)", "x.npy",
                         saved(np.save, COMPUTED.ravel())),
}


def test_note7_control_a_cache_kept_as_npy_fails_the_step(tmp_path: Path) -> None:
    result = cached_step(tmp_path, "np.load(ROOT / 'cache' / 'x.npy')", "x.npy", saved(np.save, COMPUTED))
    assert result["status"] == "failed" and result["error"].startswith("the output x is the content of cache/x.npy")


@pytest.mark.parametrize("how", sorted(set(CACHES) - {TEXT}))
def test_note7_a_cache_kept_in_another_form_fails_the_step(tmp_path: Path, how: str) -> None:
    result = cached_step(tmp_path, *CACHES[how])
    assert result["status"] == "failed" and result["error"].startswith("the output x is the content of cache/x.")


@pytest.mark.xfail(strict=True, reason="NOTE7 (stated limit): a cache kept as text is not compared")
def test_note7_a_cache_kept_as_text_fails_the_step(tmp_path: Path) -> None:
    result = cached_step(tmp_path, *CACHES[TEXT])
    assert result["status"] == "failed" and result["error"].startswith("the output x is the content of cache/x.")
