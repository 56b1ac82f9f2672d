"""The application step refuses an output that is the content of a declared file the entry read (inenv/cached.py).

A cache of earlier outputs, declared as the closed world's TIP asks, passed every step while the model never ran
(red-team pass 13, HOLE 2). In-process through the closed-world harness and the stand-in torch, as the application
step runs the entry (application.run_entry); each refusal beside a control that computes its outputs and passes.
Compared are outputs that can be a cache's fingerprint (floating point, many distinct values, rows mostly distinct):
a classifier right on every item gives the labels it reads (red-team pass 14, FALSE FAILURE 2), never a failure.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.project import app_contract
from tests.helpers.closedworld import ENTRY_STEP, IDS, _script, _settings_project

# research code's "load the outputs if they were computed before"; ``LOAD`` is how the cache is read
ENTRY = '''import numpy as np
from pathlib import Path

ROOT = Path(__file__).resolve().parent
{top}

def model(records, dtype=np.float32):
    return np.array([[len(r["id"]) * 0.37 + k * 1.1 for k in range(4)] for r in records], dtype=dtype)  # embeddings


def classify(records):
    return np.array([len(r["id"]) % 2 for r in records], dtype=np.int64)   # a classifier


def run(app):
    ids = [r["id"] for r in app.records]
{load}
    app.write("x", x, ids)


def criterion(outputs, ids, records, params):
    return {{"passed": True, "summary": "ok"}}
'''
EMBEDDINGS = {"kind": "exact", "dtype": "float32", "justification": "embeddings"}
LABELS = {"kind": "exact", "dtype": "int64", "justification": "labels"}


def _step(tmp_path: Path, load: str, cache: dict[str, Any], top: str = "",
          output: dict[str, str] | None = None, ids: list[str] = IDS) -> dict[str, Any]:
    """The application step on a project whose entry computes ``x`` as ``load`` says (one or more lines, or an
    expression), ``cache`` (name -> array or arrays) saved under cache/ and declared (``files = ["cache/*"]``)."""
    config, fake = _settings_project(tmp_path)
    root = Path(config["project_root"])
    lines = load if "\n" in load or load.startswith("    ") else f"    x = {load}"
    (root / "app.py").write_text(ENTRY.format(load=lines, top=top), encoding="utf-8")
    (root / "sample.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids), encoding="utf-8")
    (root / "cache").mkdir()
    (root / "cache" / "keep.txt").write_text("the cache folder\n", encoding="utf-8")
    for name, arrays in cache.items():
        if isinstance(arrays, bytes):  # kept as raw bytes (tofile)
            (root / "cache" / name).write_bytes(arrays)
        elif name.endswith(".npz"):
            np.savez(root / "cache" / name, **arrays)
        else:
            np.save(root / "cache" / name, arrays)
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": ["data/*.csv", "cache/*"],
         "outputs": {"x": output or EMBEDDINGS}}, root).fingerprints(root)
    done = _script(tmp_path, config, ENTRY_STEP, flags=[str(fake)])
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# what model() gives for IDS, and for a corpus of more items (the sample's rows among them)
COMPUTED = np.array([[len(i) * 0.37 + k * 1.1 for k in range(4)] for i in IDS], dtype=np.float32)
CORPUS = np.array([[n * 0.37 + k * 1.1 for k in range(4)] for n in range(7)], dtype=np.float64)
PREDICTED = np.array([1, 0, 1, 0], dtype=np.int64)  # what classify() gives for IDS

# a worker the entry forks loads the cache (a DataLoader worker with num_workers > 0, a Pool); red-team pass 14 HOLE 1
FORK_POOL = """    import multiprocessing as mp
    with mp.get_context('fork').Pool(1) as pool:
        x = pool.apply(np.load, (str(ROOT / 'cache' / 'x.npy'),))"""
FORK_PIPE = """    import io, os
    r, w = os.pipe()
    if os.fork() == 0:   # the child reads the cache and hands its bytes over
        os.write(w, open(ROOT / 'cache' / 'x.npy', 'rb').read())
        os._exit(0)
    os.close(w)
    data = b''
    while chunk := os.read(r, 65536):
        data += chunk
    os.wait()
    x = np.load(io.BytesIO(data))"""

THREAD = """    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:
        x = ex.submit(np.load, str(ROOT / 'cache' / 'x.npy')).result()"""



@pytest.mark.parametrize(("load", "cache", "top", "file"), [
    # the red team's case: the output's .npy is the cache's bytes
    ("np.load(ROOT / 'cache' / 'x.npy')", {"x.npy": COMPUTED}, "", "cache/x.npy"),
    # other bytes, the same array: an .npz under another name, or a .npy of another dtype cast back
    ("np.load(ROOT / 'cache' / 'all.npz')['emb']", {"all.npz": {"other": np.zeros(2), "emb": COMPUTED}}, "",
     "cache/all.npz"),
    ("np.load(ROOT / 'cache' / 'x.npy').astype(np.float32)", {"x.npy": COMPUTED.astype(np.float64)}, "", "cache/x.npy"),
    # the same rows in another order (a cache kept by id, reordered to the sample's)
    ("np.load(ROOT / 'cache' / 'x.npy')[[2, 0, 3, 1]]", {"x.npy": COMPUTED[[1, 3, 0, 2]]}, "", "cache/x.npy"),
    # read when the entry's file is loaded (its top level), returned by the call
    ("CACHE", {"x.npy": COMPUTED}, "CACHE = np.load(ROOT / 'cache' / 'x.npy')", "cache/x.npy"),
    # red-team pass 14 NOTE 4: computed in float64, cast to float32
    ("np.load(ROOT / 'cache' / 'x.npy').astype(np.float32)", {"x.npy": CORPUS[[len(i) for i in IDS]]}, "",
     "cache/x.npy"),
    # red-team pass 14 HOLE 1: read by a forked worker, handed to the parent
    (FORK_POOL, {"x.npy": COMPUTED}, "", "cache/x.npy"),
    (FORK_PIPE, {"x.npy": COMPUTED}, "", "cache/x.npy"),
    # held (red-team pass 14): a thread of the process reads it; float16 in an .npz under another key, cast up
    (THREAD, {"x.npy": COMPUTED}, "", "cache/x.npy"),
    ("np.load(ROOT / 'cache' / 'c.npz')['e'].astype(np.float32)", {"c.npz": {"e": COMPUTED.astype(np.float16)}}, "",
     "cache/c.npz"),
], ids=["bytes", "npz", "cast", "rows-reordered", "at-load", "float64-cast", "pool-worker",
        "forked-child", "thread", "float16-npz"])
def test_an_output_that_is_a_declared_files_content_fails_the_step(
        tmp_path: Path, load: str, cache: dict[str, Any], top: str, file: str) -> None:
    result = _step(tmp_path, load, cache, top)
    assert result["status"] == "failed", result
    assert result["error"].startswith(f"the output x is the content of {file}, a declared file the entry read: "
                                      "outputs must be computed in this run"), result


def test_an_output_kept_one_file_per_item_fails_the_step(tmp_path: Path) -> None:
    """Red-team pass 14 NOTE 4: a cache kept one file per item (``cache/<id>.npy``), stacked: each file one row."""
    rows = {f"{i}.npy": COMPUTED[n] for n, i in enumerate(IDS)}
    result = _step(tmp_path, "np.stack([np.load(ROOT / 'cache' / f'{i}.npy') for i in ids])", rows)
    assert result["status"] == "failed", result
    assert result["error"].startswith("the output x is the content of cache/a.npy, a declared file the entry read "
                                      "(its rows with those of 3 more): outputs must be computed"), result


@pytest.mark.parametrize(("load", "cache"), [
    ("model(app.records)", {"x.npy": COMPUTED}),  # the model runs; the cache is there, unread
    # a declared array read, outputs computed from it
    ("np.load(ROOT / 'cache' / 'x.npy') * 0 + model(app.records) + 1", {"x.npy": COMPUTED}),
    # read, and one row of the output in no declared file (the cache holds the others)
    ("np.load(ROOT / 'cache' / 'x.npy')[:0].sum() + model(app.records)", {"x.npy": COMPUTED[:3]}),
    # a declared array of other values read by a forked worker, the outputs computed by the model
    (FORK_POOL.replace("x = pool", "_ = pool") + "\n    x = model(app.records)", {"x.npy": COMPUTED + 1}),
], ids=["unread", "computed-from-it", "a-row-computed", "pool-worker-computed"])
def test_an_entry_that_computes_its_outputs_passes(tmp_path: Path, load: str, cache: dict[str, Any]) -> None:
    assert _step(tmp_path, load, cache) == {"status": "passed", "written": ["outputs/x.npy"]}


# red-team pass 14 FALSE FAILURE 2: the ground truth read to log the accuracy (to pick a threshold)
LABELS_READ = """    labels = np.load(ROOT / 'cache' / 'labels.npy')
    x = {predict}
    print('accuracy', float((x == labels).mean()))"""


@pytest.mark.parametrize(("predict", "labels", "output"), [
    ("classify(app.records)", PREDICTED, LABELS),  # right on every item
    ("classify(app.records)", PREDICTED[[1, 0, 3, 2]], LABELS),  # each class as often as the labels hold it
    ("classify(app.records) == 1", PREDICTED == 1, {**LABELS, "dtype": "bool"}),  # a mask
    ("classify(app.records).astype(np.float32)", PREDICTED.astype(np.float32), {**EMBEDDINGS}),  # whole numbers
    ("np.argsort(classify(app.records), kind='stable')", np.array([1, 3, 0, 2]), LABELS),  # a ranking
], ids=["all-right", "same-class-counts", "mask", "float-labels", "ranking"])
def test_a_classifier_whose_predictions_equal_the_labels_it_reads_passes(
        tmp_path: Path, predict: str, labels: Any, output: dict[str, str]) -> None:
    """An output of few values (an integer, bool or whole-valued one) equals the ground truth whenever the model is
    right: it is never compared (a cache of labels alone is the stated limit), while a float output is (above)."""
    result = _step(tmp_path, LABELS_READ.format(predict=predict), {"labels.npy": labels}, output=output)
    assert result == {"status": "passed", "written": ["outputs/x.npy"]}


# the child reads the cache with its notes' descriptor closed: the parent could not hear of the read
NOTES_CLOSED = """    import os
    from kernodeck_inenv import children
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(children.NOTES[0])
        try:
            open(ROOT / 'cache' / 'x.npy', 'rb').read()
            os.write(w, b'read')
        except Exception as exc:
            os.write(w, str(exc).encode())
        os._exit(0)
    os.close(w)
    told = os.read(r, 65536).decode()
    os.wait()
    raise RuntimeError(told)"""


def test_a_forked_childs_read_it_cannot_hand_to_the_parent_is_refused(tmp_path: Path) -> None:
    """The parent compares the outputs with what its children read (red-team pass 14 HOLE 1): a child whose notes
    cannot be written is refused the read, as it is refused a write."""
    result = _step(tmp_path, NOTES_CLOSED, {"x.npy": COMPUTED})
    assert result["status"] == "failed", result
    assert "x.npy in a forked process whose notes to the parent cannot be written" in result["error"], result
    control = _step(tmp_path / "control", NOTES_CLOSED.replace("os.close(children.NOTES[0])", "pass"),
                    {"x.npy": COMPUTED})
    assert control["status"] == "failed" and "raised RuntimeError: read" in control["error"], control


# red-team pass 15: rows an entry picks out of a LARGER declared array are what a model gives (FALSE FAILURES 3, 1 and
# NOTE 2); with them, the sample's rows picked out of a cached corpus (pass 14 NOTE 4's first case) are not seen
SEARCH = """    index = np.load(ROOT / 'cache' / 'index.npy')   # the declared documents' embeddings
    q = model(app.records)
    x = index[np.argmin(((q[:, None] - index[None]) ** 2).sum(-1), axis=1)]   # the nearest document's embedding"""
SCORES = """    table = np.load(ROOT / 'cache' / 'calibration.npy')   # a declared float32 table, many values
    x = np.array([0.1 + len(r['id']) * 0.0731 for r in app.records], dtype=np.float16)   # float16 scores"""
NEAREST = """    train_x, train_y = np.load(ROOT / 'cache' / 'train_x.npy'), np.load(ROOT / 'cache' / 'train_y.npy')
    q = np.array([len(r['id']) for r in app.records], dtype=np.float32)
    x = train_y[np.abs(q[:, None] - train_x[None]).argmin(axis=1)]   # a 1-nearest-neighbour regressor"""
TEN = ["a" * n for n in range(1, 11)]  # ten items: a 1-D output of ten distinct values can be a fingerprint
TRAIN_X = np.arange(0, 40, dtype=np.float32) * 0.5


@pytest.mark.parametrize(("load", "cache", "ids", "dtype"), [
    (SEARCH, {"index.npy": CORPUS.astype(np.float32)}, IDS, "float32"),  # FALSE FAILURE 3: a semantic search
    (SCORES, {"calibration.npy": np.linspace(0, 1, 100_001, dtype=np.float32)}, TEN, "float16"),  # FALSE FAILURE 1
    (NEAREST, {"train_x.npy": TRAIN_X, "train_y.npy": TRAIN_X * 1.37 + 0.011}, TEN, "float32"),  # NOTE 2
    # the stated limit: the sample's rows picked out of a corpus's cache, cast to float32
    ("np.load(ROOT / 'cache' / 'all.npy')[[len(i) for i in ids]].astype(np.float32)", {"all.npy": CORPUS}, IDS,
     "float32"),
], ids=["semantic-search", "float16-scores", "nearest-neighbour", "limit:corpus-rows"])
def test_rows_picked_out_of_a_larger_declared_array_pass(
        tmp_path: Path, load: str, cache: dict[str, Any], ids: list[str], dtype: str) -> None:
    """Only declared arrays of no more rows than the output are compared (a file of one row is one row): before,
    each of these failed "the output x is the content of cache/..." as a cache."""
    result = _step(tmp_path, load, cache, output={**EMBEDDINGS, "dtype": dtype}, ids=ids)
    assert result == {"status": "passed", "written": ["outputs/x.npy"]}, result


@pytest.mark.parametrize("extra", [0, 1], ids=["as-many-rows", "control:one-row-more"])
def test_a_declared_array_of_more_rows_than_the_output_is_never_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: int) -> None:
    """The row scan decides from the header (red-team pass 15, NOTE 7): an array of more rows than the output is
    neither mapped nor read (np.load never called on it), an .npz member of more rows never read; one of as many rows
    is, and holds the output."""
    from kernodeck.inenv import cached

    big = np.concatenate([COMPUTED, COMPUTED[:extra] + 5])
    np.save(tmp_path / "x.npy", big)
    np.savez(tmp_path / "x.npz", emb=big)
    loaded: list[str] = []
    real_load = np.load
    monkeypatch.setattr(np, "load", lambda path, *a, **k: (loaded.append(str(path)), real_load(path, *a, **k))[1])
    npz_read: list[str] = []
    real_read = np.lib.format.read_array
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: (npz_read.append("read"), real_read(*a, **k))[1])
    found = {name: [a.shape for a in cached._arrays(str(tmp_path / name), COMPUTED.shape[1:], len(COMPUTED))]
             for name in ("x.npy", "x.npz")}
    if extra:
        assert found == {"x.npy": [], "x.npz": []} and loaded == [] and npz_read == [], (found, loaded, npz_read)
    else:
        assert found == {"x.npy": [COMPUTED.shape], "x.npz": [COMPUTED.shape]}, found
        assert loaded == [str(tmp_path / "x.npy"), str(tmp_path / "x.npz")] and npz_read == ["read"], (loaded, npz_read)
    assert cached._rows_in(COMPUTED, [str(tmp_path / "x.npy")]) == ([] if extra else [str(tmp_path / "x.npy")])


# red-team pass 18, NOTE7: the outputs' raw bytes kept in a form no array loader here reads as the output
RAW = "np.fromfile(ROOT / 'cache' / 'x.bin', dtype=np.{dtype}).reshape(-1, 4){cast}"


@pytest.mark.parametrize(("load", "cache"), [
    (RAW.format(dtype="float32", cast=""), {"x.bin": COMPUTED.tobytes()}),  # tofile, np.fromfile
    (RAW.format(dtype="float64", cast=".astype(np.float32)"), {"x.bin": COMPUTED.astype(np.float64).tobytes()}),
    ("np.fromfile(ROOT / 'cache' / 'x.bin', dtype=np.float32).reshape(4, -1).T", {"x.bin": COMPUTED.T.tobytes()}),
    ("np.load(ROOT / 'cache' / 'x.npy').T", {"x.npy": COMPUTED.T.copy()}),  # a transposed .npy
    ("np.load(ROOT / 'cache' / 'x.npy').reshape(-1, 4)", {"x.npy": COMPUTED.ravel()}),  # a flattened one
    ("np.load(ROOT / 'cache' / 'x.npy').reshape(-1, 4)", {"x.npy": COMPUTED.reshape(2, 8)}),  # reshaped
], ids=["raw", "raw-float64", "raw-transposed", "npy-transposed", "npy-flattened", "npy-reshaped"])
def test_an_output_whose_raw_bytes_a_declared_file_holds_is_refused(
        tmp_path: Path, load: str, cache: dict[str, Any]) -> None:
    name = next(iter(cache))
    result = _step(tmp_path, load, cache)
    assert result["status"] == "failed", result
    assert result["error"].startswith(f"the output x is the content of cache/{name}, a declared file"), result


@pytest.mark.parametrize(("load", "cache"), [
    # the sample's rows picked out of a raw corpus of more rows (their bytes a part of it): no cache
    (RAW.format(dtype="float32", cast="[1:5]"), {"x.bin": CORPUS.astype(np.float32).tobytes()}),
    # a declared raw file of as many bytes, other values: computed (the model), the file only read
    ("model(app.records) + 0 * np.fromfile(ROOT / 'cache' / 'x.bin', dtype=np.float32).reshape(-1, 4)",
     {"x.bin": (COMPUTED + 1).tobytes()}),
], ids=["raw-corpus-rows", "raw-other-values"])
def test_raw_bytes_of_more_values_or_other_values_pass(tmp_path: Path, load: str, cache: dict[str, Any]) -> None:
    assert _step(tmp_path, load, cache) == {"status": "passed", "written": ["outputs/x.npy"]}


def _npz(arr: Any, compressed: bool) -> bytes:
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, x=arr)
    return buffer.getvalue()


WIDE = np.random.default_rng(7).standard_normal((6, 5))  # numpy's default width, full precision


@pytest.mark.parametrize(("content", "held"), [
    (WIDE.tobytes(), True),  # raw float64, the output narrowed from it (red-team pass 19, FP5)
    (WIDE.T.copy().tobytes(), True),  # transposed
    (WIDE.astype(np.float16).tobytes(), False),  # float16 of other values: the output is not float16-exact
    (_npz(WIDE.astype(np.float32).T.copy(), True), True),  # a compressed, transposed .npz member
    (_npz(WIDE.astype(np.float32), False), True),
    (np.concatenate([WIDE, WIDE]).tobytes(), False),  # a corpus of more values
    (np.where(np.arange(30).reshape(6, 5) == 29, 0.5, WIDE).tobytes(), False),  # one value another
], ids=["raw-float64", "raw-float64-transposed", "float16-other", "npz-compressed-transposed", "npz", "corpus",
        "one-other-value"])
def test_values_kept_in_any_width_are_the_outputs(tmp_path: Path, content: bytes, held: bool) -> None:
    from kernodeck.inenv import cached

    path = tmp_path / ("x.npz" if content.startswith(b"PK") else "x.bin")
    path.write_bytes(content)
    out = WIDE.astype(np.float32)
    assert cached._values_in(out, [str(path)]) == ([str(path)] if held else [])
    half = WIDE.astype(np.float16)
    path.write_bytes(half.tobytes())  # a float16 output's values, widened to float32: the same values
    assert cached._values_in(half.astype(np.float32), [str(path)]) == [str(path)]
