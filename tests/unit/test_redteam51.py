"""Red-team pass 51 (notes: /work/notes/redteam51.md): "the same" judged by an equality, digest, stat or name that
does not cover what runs or is read, attacked by class through real sessions (measured there; these tests reproduce
each finding without a built env).

Fixed: PYC2 and PYC4 (the bytecode check compares every field of each code object by the bytes marshal writes, the
constants keyed by their bits, beside the instruction bytes that run: inenv/observe._key), DET1 (tolerance.same_bits
wherever a record says bitwise), SAMPLE1 (JSON Lines split at \n only), PYC3 (envfiles.source_of, one rule). NPY1
(inenv/arrays.read_npy: only an .npy file is an output's array, in the steps, compare and drift). REFREC1
(the reference's system.json and inventory.txt fingerprinted in [environment], checked by the reference step and
manifest.inconsistency).

PYC2 (an honest pyc refused: FALSE FAILURE of ``env-files-unchanged``, a loop the TIP cannot end; the class of PYC1,
the other side of CPython's code equality; inenv/observe._bytecode_of_source, env/inventory.bytecode_validator): the
bytecode check accepts a pyc only when ``marshal.loads(pyc) == compile(source)``, and CPython's code equality compares
constants with ``==`` (``_PyCode_ConstantKey``: a float keyed by its type and value), so a code object holding a NaN
constant is never equal to another one, not even to itself compiled again. The compiler folds a NaN from literal
constants (``1e400 * 0``, ``1e400 - 1e400``: the idiom ``str(x) == str(1e400 * 0)`` of older libraries, e.g.
monasca-agent's ``util.isnan``), so the pyc the interpreter itself writes for such a module of a locked distribution
is refused as "not the bytecode of its source" by the next verify (``verify -- --no-rebuild`` FAILS in the install
layer; a plain verify's reuse check refuses the env and rebuilds it from scratch every time), and the TIP
``nox -s rebuild -- --fresh`` rebuilds an env whose next run writes the same pyc again. Measured on CPython 3.10.13,
3.11.7, 3.12.1 and 3.13.0. Fix idea (by class: judge the bytes, not an equality the runtime defines for values):
compare the constants by their marshalled form (a float by its 8 bytes, recursively through tuples, frozensets and
nested code) instead of ``==``, keeping the instruction-bytes comparison of PYC1's fix. CONTROL: the same module with
a finite folded constant (``2.5 * 3``) is accepted; a pyc whose NaN constant is replaced by 0.0 is
refused.

DET1 (FALSE claim ``deterministic``: "bitwise identical" judged by value equality; inenv/determinism._per_output, the
same word in resume_app's ``bitwise`` and kind_exact's ``bitwise_equal``): the determinism step calls the repeats
bitwise identical when ``np.array_equal`` holds, and ``+0.0 == -0.0``: repeats whose zeros carry another sign bit
(2398 of the 4799 zeros of the MiniLM embeddings in the real session below) are "bitwise identical", on CPU, where
the claim is bitwise. What a consumer of those bits computes differs (``1/x``, ``copysign``, ``atan2``, ``sign``
-> +-inf, +-pi), and the step exists to catch state that moves between calls. Measured in a real session on this
repository: checks/app.py's ``run`` pruned components under 0.02 to a zero whose sign an unseeded draw chose
(``np.zeros_like(arr) * signs``), ``reference -- --new`` then ``verify -- --no-rebuild``: ``PASSED: 13 passed,
1 skipped``, ``determinism: ok - bitwise identical over 3 runs``, claim ``deterministic`` established, while the
reference's embeddings.npy and the run's differ in 2398 sign bits (``array_equal`` True, bytes unequal). Fix idea
(by class: "bitwise" means the bytes): compare ``a.tobytes() == b.tobytes()`` with dtype and shape (or
``np.array_equal(a.view(np.uint8), b.view(np.uint8))``) wherever a record says bitwise. The same check ignores the
dtype (only the shape is compared, and the reruns' outputs are not checked for structure): a rerun writing float64
where the first call wrote float32, the same values, is "bitwise identical" too. CONTROL: repeats whose values' signs
are drawn afresh fail the step.

SAMPLE1 (an honest sample refused: FALSE FAILURE of ``reference`` and ``verify``, its message naming a JSON error that
is not there; the sample's lines split twice differently; inenv/_common.load_sample, runformat/recording.py's
``items``): the sample is JSON Lines ("one JSON object per line"), whose records end at ``\n``, but Kernodeck splits
it with ``str.splitlines()``, which also ends a line at U+2028, U+2029, U+0085 (and \x1c-\x1e, \x0b, \x0c, \r, which
JSON never leaves raw in a string). JSON allows U+2028/U+2029/U+0085 unescaped in a string and
``json.dumps(..., ensure_ascii=False)`` writes them so: a text corpus scraped from the web holds them. Measured in a
real session on this repository: the first record of dossier/reference/sample.jsonl given a U+2028 in its text,
written with ``ensure_ascii=False`` (every ``\n`` line still one JSON object), ``nox -s reference -- --new``:
``FAILED at application (layer: data-loading): sample.jsonl:1: not JSON: Unterminated string starting at: line 1
column 24``.
Fix idea (by class: one reader for one format, the format's own): split the sample on ``\n`` only
(``raw.split("\n")``, a trailing ``\r`` stripped) in load_sample and in recording.py; the same ``splitlines()`` reads
RECORD files as CSV (env/records.py, inenv/observe.py), whose quoted fields may hold such characters too. CONTROL: the
same records written with ``ensure_ascii=True`` are read; a line that is not JSON is refused, named.

REFREC1 (a difference from the reference lost: "the same as the reference's" read from a file no digest covers; a
statement gap of the report, not of the verdict; runformat/recording.py, refdelta.vs_reference, manifest.inconsistency):
the manifest names the reference's ``inventory.txt`` and ``system.json`` (``[environment] inventory``, ``system``) but
records no digest of either, and nothing holds them to the run that made the reference; verify reads both for "What
differs from the reference" (the variables, the system chain, the packages) and ``likely_cause``. Measured in a real
session: ``ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 verify -- --no-rebuild`` names ``variable ATEN_CPU_CAPABILITY:
(unset) -> default``, ``OMP_NUM_THREADS`` and ``system torch_cpu_capability: AVX512 -> DEFAULT``; with the two variables
(and DEFAULT) written into dossier/reference/system.json, the same run says "system chain: the same as the
reference's" and "variables ...: the same as the reference's", PASSED, the manifest's id unchanged (a merge resolved
by hand, a record copied from another machine's run does the same without intent). Fix idea (by class: every file of
the reference that a run reads is in its id): the sha256 of inventory.txt and system.json in ``[environment]``, checked
where they are read and by ``inconsistency`` (history entries too). CONTROL: an edited output file is named.

PYC3 (an honest pyc refused: FALSE FAILURE of ``env-files-unchanged``, a loop as PYC2's; one name derived twice
differently; env/envfiles.allowed vs envfiles._source_of): a bytecode file is allowed when ``<stem>.py`` is owned,
the stem taken as everything before ``.cpython-311`` (``x.y`` for ``x.y.cpython-311.pyc``, as importlib's
``cache_from_source`` names it), but it is then checked against ``_source_of``'s source, the name cut at its FIRST
dot (``x.py``). A module file with a dot in its stem that a tool loads by path (``spec_from_file_location``: config
and plugin files such as ``gunicorn.conf.py``-style names, loaded by SourceFileLoader, which writes the pyc) leaves an
honest ``x.y.cpython-311.pyc`` that the next verify refuses (``unreadable: No such file or directory``, or "its header
names another source" where an ``x.py`` exists). Where ``x.py`` exists, is owned and has the same mtime and size as
``x.y.py``, the check even accepts a pyc holding ``x.py``'s code, which importlib then runs for ``x.y.py`` (not
measured: it needs two such files of a locked wheel). Fix idea (by class: derive the name once): ``_source_of`` from
``allowed``'s own partition on ``.{tag}`` (one function for both). CONTROL: the honest pyc of ``__init__.py`` is
accepted (checked now: 1).

PYC4 (a planted pyc accepted: FALSE ``env-files-unchanged``, PYC1's class where its fix stops; inenv/observe
_bytecode_of_source, _instructions): after PYC1's fix a pyc is accepted when its code compares equal to its
source's AND every code object's instruction bytes and qualified name are the compiled ones. Code equality also skips
``co_localspluskinds`` (which slot is a plain local, a cell, a free variable; co_varnames, co_cellvars, co_freevars
and co_nlocals are read from it) and ``co_stacksize``. A pyc whose function declares its cell variable a plain local
is accepted, and what runs differs: ``locals()`` (and a frame's ``f_locals``, what debuggers, ``str.format(**locals())``
and TorchScript's closure lookup read) hands out the cell object, not the value. Measured on CPython 3.11.7: validator
"" (accepted), the module's ``outer()`` says "cell" where its source says "int". Measured in a real session on this
repository: torch/nn/modules/__pycache__/module.cpython-311.pyc (written by a verify) rewritten with
``Module._apply``'s cell ``FakeTensor`` declared a plain local (header and every other byte of the payload as
compiled), ``verify -- --no-rebuild``: ``PASSED: 13 passed, 1 skipped``, ``bytecode_since_build: {checked_now: 1,
not_its_source: []}``, the pyc kept in kernodeck-bytecode.json, ``env-files-unchanged`` established; in the env,
``torch.nn.Module._apply.__code__.co_cellvars`` is ``()`` (its source compiles to ``('FakeTensor',)``), and a frame's
``f_locals['FakeTensor']`` inside ``Linear(2, 2).to("cpu")`` is a ``cell`` (``_TensorMeta``, the class's metaclass,
with the honest pyc). Fix idea (by class: compare every
field the marshal format writes, not a chosen few): ``marshal.dumps(loaded, 2) == marshal.dumps(compiled, 2)``
(version 2 writes no reference flags, the cause of pass 50's 2-in-600 false failures of a byte comparison; floats by
their bits, which also ends PYC2), compiling with the pyc's own ``co_filename`` (importlib replaces it at load), beside
the adaptive instruction bytes (marshal writes the de-specialised code). Measured: all 3119 pycs this repository's env
wrote in a verify are equal to their source's compile under ``marshal.dumps(..., 2)``; the planted one is not.
CONTROL: the honest pyc of the same closure is accepted.

NPY1 (a traceback in place of ERROR + TIP, and the first error lost; a file judged by what its loader makes of it
before its digest; inenv/arrays._load_npy, reference.check_reference, compare_outputs._read): ``np.load`` chooses the
format by the file's first bytes, so a zip at ``embeddings.npy`` (``np.savez`` to an open file keeps its name) loads
as an ``NpzFile``; check_structure then raises ``AttributeError`` (``_load_npy`` catches OSError, ValueError and
EOFError only), and the reference step checks the manifest's digest AFTER load and structure. Measured in a real
session on this repository: dossier/reference/embeddings.npy replaced by an npz of the same array, ``verify --
--no-rebuild``: ``reference: FAILED - AttributeError: 'NpzFile' object has no attribute 'dtype'`` with a 12-line
Python traceback, ``FAILED at reference (layer: unknown)``, no ERROR, no TIP; the cause it should name first
("reference embeddings.npy differs from the fingerprint in manifest.toml") is never said. ``nox -s compare --
dossier/reference RUN`` with the same file prints compare_outputs.py's Python traceback, then ``ERROR: comparing the
outputs in .../bin/python failed: ... AttributeError: 'NpzFile' object has no attribute 'ndim'`` and a wrong TIP,
``nox -s rebuild, then: nox -s compare -- A B`` (the env is sound; changed_since_written, which names the file, is
never reached). Fix idea (by class: hold
a file to its fingerprint before reading it, and read one format): check the digest first, load with
``np.lib.format.read_array`` (or refuse a result that is not an ``ndarray``) and turn any error of the load into a
CheckFailed naming the file. CONTROL: a Git LFS pointer at the path and an array of another dtype are refused, named.
"""

from __future__ import annotations

import importlib.util
import json
import marshal
import math
import py_compile
import struct
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.env.envfiles import allowed, check, source_of
from kernodeck.env.inventory import bytecode_validator
from kernodeck.env.records import read_records
from kernodeck.env.snapshot import scan, write_snapshot
from kernodeck.inenv._common import CheckFailed, load_sample
from kernodeck.inenv.arrays import _load_npy, check_structure
from kernodeck.runformat.manifest import identity, inconsistency
from kernodeck.runformat.refdelta import vs_reference
from tests.helpers.closedworld import determinism_step

NAN_SOURCE = "def isnan(val):\n    return str(val) == str(1e400 * 0)\n"
FINITE_SOURCE = "def isnan(val):\n    return str(val) == str(2.5 * 3)\n"


def _honest(tmp_path: Path, source: str) -> tuple[Path, Path]:
    """The module and the pyc the interpreter itself writes for it (py_compile: importlib's own writer)."""
    src = tmp_path / "rt51mod.py"
    src.write_text(source, encoding="utf-8")
    pyc = Path(importlib.util.cache_from_source(str(src)))
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    return src, pyc


def _why(src: Path, pyc: Path) -> list[str]:
    return [why for _, why in bytecode_validator(sys.executable)([(str(pyc), str(src))])]


def test_pyc2_premise_the_compiler_folds_a_nan_constant_and_code_equality_is_not_reflexive(tmp_path: Path) -> None:
    src, pyc = _honest(tmp_path, NAN_SOURCE)
    code = compile(NAN_SOURCE, str(src), "exec", dont_inherit=True)
    assert any(isinstance(c, float) and math.isnan(c) for c in code.co_consts[0].co_consts)
    loaded = marshal.loads(pyc.read_bytes()[16:])
    assert marshal.dumps(loaded) == marshal.dumps(code)  # the very bytes the source compiles to
    assert loaded != code  # and still unequal: the check's equality


def test_pyc2_the_pyc_the_interpreter_writes_for_a_nan_constant_is_accepted(tmp_path: Path) -> None:
    assert _why(*_honest(tmp_path, NAN_SOURCE)) == []


def _replaced(pyc: Path, old: float, new: float) -> None:
    data, a, b = pyc.read_bytes(), struct.pack("<d", old), struct.pack("<d", new)
    assert data.count(a) == 1
    pyc.write_bytes(data.replace(a, b))


def test_pyc2_control_a_finite_folded_constant_is_accepted_and_refused_once_changed(tmp_path: Path) -> None:
    src, pyc = _honest(tmp_path, FINITE_SOURCE)
    assert _why(src, pyc) == []
    _replaced(pyc, 7.5, 7.25)
    assert _why(src, pyc) == ["not the bytecode of its source"]


def test_pyc2_control_a_nan_constant_replaced_stays_refused(tmp_path: Path) -> None:
    """What a fix must keep: the NaN's bytes changed (to 0.0) is another program."""
    src, pyc = _honest(tmp_path, NAN_SOURCE)
    _replaced(pyc, 1e400 * 0, 0.0)
    assert _why(src, pyc) == ["not the bytecode of its source"]


# DET1 ----------------------------------------------------------------------------------------------------------------
# Each call: the same values (a seeded draw, half of them 0 after a ReLU), each zero's sign drawn afresh (unseeded,
# 2 x 8 per row: two calls agree on every sign with probability 2**-64).
ZERO_SIGNS = """
def run(app):
    key = [r["id"] for r in app.records]
    values = np.maximum(np.random.default_rng(7).standard_normal((len(key), 16)), 0.0)
    signs = np.random.default_rng().choice([-1.0, 1.0], size=values.shape)
    app.write("x", np.where(values == 0.0, 0.0 * signs, values), key)
"""
# The same class through the dtype: each call after the first of a module load writes float64, the same values.
DTYPE_MOVES = """
CALLS = [0]
def run(app):
    CALLS[0] += 1
    key = [r["id"] for r in app.records]
    values = np.random.default_rng(7).standard_normal((len(key), 16)).astype(np.float32)
    app.write("x", values if CALLS[0] == 1 else values.astype(np.float64), key)
"""
# the control: the nonzero values' signs drawn afresh (a value moves, not only a zero's sign bit)
VALUE_SIGNS = ZERO_SIGNS.replace("np.where(values == 0.0, 0.0 * signs, values)", "values * signs")


FLOAT = {"x": {"kind": "allclose", "rtol": 0.0, "atol": 1e-6, "dtype": "float64", "justification": "float64 features"}}


def _determinism(tmp_path: Path, entry: str) -> dict[str, Any]:
    """The determinism step run as the runner runs it (tests/helpers/closedworld.py), on a float output."""
    return determinism_step(tmp_path, entry, FLOAT)


def test_det1_premise_the_bits_differ_and_array_equal_says_equal() -> None:
    a, b = np.array([0.0, 1.5]), np.array([-0.0, 1.5])
    assert a.tobytes() != b.tobytes() and bool(np.array_equal(a, b))
    assert np.copysign(1.0, a[0]) != np.copysign(1.0, b[0])  # what a consumer of the bits (1/x, atan2, sign) sees


@pytest.mark.parametrize("entry", [ZERO_SIGNS, DTYPE_MOVES], ids=["zero-signs", "dtype"])
def test_det1_repeats_whose_bits_differ_are_not_bitwise_identical_on_cpu(tmp_path: Path, entry: str) -> None:
    result = _determinism(tmp_path, entry)
    assert result["status"] == "failed", result
    assert "runs of the entry on CPU in one process differ (x)" in result["error"], result


def test_det1_control_repeats_whose_values_differ_fail(tmp_path: Path) -> None:
    result = _determinism(tmp_path, VALUE_SIGNS)
    assert result["status"] == "failed", result
    assert "runs of the entry on CPU in one process differ (x)" in result["error"], result


# SAMPLE1 -------------------------------------------------------------------------------------------------------------
RECORDS = [{"id": "a", "text": "first line\u2028second line"}, {"id": "b", "text": "next\x85line"},
           {"id": "c", "text": "x"}]


def _sample(tmp_path: Path, ensure_ascii: bool) -> Path:
    path = tmp_path / "sample.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in RECORDS), encoding="utf-8")
    return path


def test_sample1_premise_a_json_lines_reader_reads_every_record(tmp_path: Path) -> None:
    """JSON Lines separates records by ``\\n``; JSON allows U+2028 and U+0085 unescaped in a string, and
    ``json.dumps(..., ensure_ascii=False)`` (the common writer of a text corpus) leaves them so."""
    raw = _sample(tmp_path, ensure_ascii=False).read_bytes()
    assert "\u2028".encode() in raw and "\x85".encode() in raw
    assert [json.loads(line) for line in raw.decode("utf-8").split("\n") if line] == RECORDS


def test_sample1_an_honest_sample_with_a_line_separator_in_a_text_is_read(tmp_path: Path) -> None:
    assert load_sample(_sample(tmp_path, ensure_ascii=False)) == RECORDS


def test_sample1_control_the_same_records_escaped_are_read_and_a_broken_line_is_refused(tmp_path: Path) -> None:
    path = _sample(tmp_path, ensure_ascii=True)
    assert load_sample(path) == RECORDS
    path.write_text(path.read_text(encoding="utf-8") + '{"id": "d", "text": \n', encoding="utf-8")
    with pytest.raises(CheckFailed, match=r"sample.jsonl:4: not JSON"):
        load_sample(path)


# REFREC1 -------------------------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def _reference_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    folder.mkdir(parents=True)
    for path in (ROOT / "dossier" / "reference").iterdir():
        if path.is_file():
            (folder / path.name).write_bytes(path.read_bytes())
    return folder


def _as_if_run_with(folder: Path) -> Path:
    """The reference's system.json told that it ran with ATEN_CPU_CAPABILITY=default and OMP_NUM_THREADS=1."""
    system = json.loads((folder / "system.json").read_text(encoding="utf-8"))
    system["variables"] = {**system.get("variables", {}), "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"}
    (folder / "system.json").write_text(json.dumps(system, indent=2) + "\n", encoding="utf-8")
    return folder


def _run_with(tmp_path: Path, folder: Path) -> Path:
    """A run folder whose system record is the reference's as made, run with the two variables set."""
    run = tmp_path / "run"
    run.mkdir()
    system = json.loads((ROOT / "dossier" / "reference" / "system.json").read_text(encoding="utf-8"))
    system["variables"] = {**system.get("variables", {}), "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"}
    (run / "system.json").write_text(json.dumps(system), encoding="utf-8")
    (run / "inventory.txt").write_text((folder / "inventory.txt").read_text(encoding="utf-8"), encoding="utf-8")
    return run


def test_refrec1_premise_the_edit_hides_the_difference_and_leaves_the_id(tmp_path: Path) -> None:
    made = _reference_copy(tmp_path / "made")
    run = _run_with(tmp_path, made)
    assert set(vs_reference(made, run)["variables"]) == {"ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS"}  # named
    edited = _as_if_run_with(_reference_copy(tmp_path / "edited"))
    assert vs_reference(edited, run)["variables"] == {}  # "the same as the reference's"
    manifest = tomllib.loads((edited / "manifest.toml").read_text(encoding="utf-8"))
    assert manifest["id"] == identity(manifest)  # the reference is still "itself"


def test_refrec1_an_edited_system_record_of_the_reference_is_named(tmp_path: Path) -> None:
    assert "system.json" in inconsistency(_as_if_run_with(_reference_copy(tmp_path)))


def test_refrec1_control_an_edited_output_of_the_reference_is_named(tmp_path: Path) -> None:
    folder = _reference_copy(tmp_path)
    assert inconsistency(folder) == ""
    data = bytearray((folder / "embeddings.npy").read_bytes())
    data[-1] ^= 1
    (folder / "embeddings.npy").write_bytes(bytes(data))
    assert inconsistency(folder) == "embeddings.npy does not match the manifest's digest"


# PYC3 ----------------------------------------------------------------------------------------------------------------
def _tiny_env(tmp_path: Path) -> tuple[Path, str, Path]:
    """An env of one locked distribution whose package holds ``x.y.py`` (a module file with a dot in its stem: a
    config or plugin a tool loads by path), its build snapshot written; returns (env, snapshot digest, that file)."""
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.7\n", encoding="utf-8")
    files = {"pkg/__init__.py": "", "pkg/x.y.py": "VALUE = 'x.y'\n"}
    for rel, text in files.items():
        (site / rel).write_text(text, encoding="utf-8")
    info = site / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in [*files, "pkg-1.0.dist-info/RECORD"]),
                                 encoding="utf-8")
    digest = write_snapshot(env, scan(env), {"locked": ["pkg"], "owned_by_record": 3})
    return env, digest, site / "pkg" / "x.y.py"


def test_pyc3_premise_the_interpreter_caches_a_dotted_stem_under_its_whole_stem(tmp_path: Path) -> None:
    env, _, src = _tiny_env(tmp_path)
    pyc = Path(importlib.util.cache_from_source(str(src)))
    assert pyc.name == f"x.y.{sys.implementation.cache_tag}.pyc"  # what SourceFileLoader reads and writes
    rel = pyc.relative_to(env).as_posix()
    assert allowed(rel, ["f", 0, 0, 0, 0, 0, 1, ""], read_records(env, ["pkg"]).owned, "cpython-311")
    assert source_of(rel, "cpython-311").endswith("/pkg/x.y.py")  # fixed: checked against its own source


def test_pyc3_the_honest_pyc_of_a_dotted_stem_module_is_accepted(tmp_path: Path) -> None:
    env, digest, src = _tiny_env(tmp_path)
    py_compile.compile(str(src), cfile=importlib.util.cache_from_source(str(src)), doraise=True)
    found = check(env, ["pkg"], digest, bytecode_validator(sys.executable))
    assert found.bad_bytecode == [] and found.clean, found.problems()


def test_pyc3_control_the_honest_pyc_of_a_plain_stem_is_accepted(tmp_path: Path) -> None:
    env, digest, _ = _tiny_env(tmp_path)
    src = env / "lib" / "python3.11" / "site-packages" / "pkg" / "__init__.py"
    py_compile.compile(str(src), cfile=importlib.util.cache_from_source(str(src)), doraise=True)
    found = check(env, ["pkg"], digest, bytecode_validator(sys.executable))
    assert found.clean and found.bytecode_checked_now == 1, found.problems()


# PYC4 ----------------------------------------------------------------------------------------------------------------
CLOSURE = ("def outer():\n    x = 1\n    def inner():\n        return x\n    x = 2\n"
           "    return type(locals()['x']).__name__\n")


def _closure_module(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "rt51kinds.py"
    src.write_text(CLOSURE, encoding="utf-8")
    pyc = Path(importlib.util.cache_from_source(str(src)))
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    return src, pyc


def _cell_made_local(pyc: Path) -> None:
    """The honest pyc with ``outer``'s cell variable ``x`` declared a plain local (co_localspluskinds): the same
    instruction bytes, names, constants and tables."""
    data = pyc.read_bytes()
    module = marshal.loads(data[16:])
    outer = next(c for c in module.co_consts if isinstance(c, type(module)))
    local = outer.replace(co_varnames=outer.co_varnames + outer.co_cellvars, co_cellvars=(),
                          co_nlocals=outer.co_nlocals + len(outer.co_cellvars))
    pyc.write_bytes(data[:16] + marshal.dumps(module.replace(
        co_consts=tuple(local if c is outer else c for c in module.co_consts))))


def _outer(src: Path) -> str:
    probe = f"import sys; sys.path.insert(0, {str(src.parent)!r}); import rt51kinds; print(rt51kinds.outer())"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(not hasattr(compile("", "", "exec"), "_co_code_adaptive"), reason="CPython 3.11+'s adaptive code")
def test_pyc4_premise_a_cell_declared_local_runs_another_program_and_compares_equal(tmp_path: Path) -> None:
    src, pyc = _closure_module(tmp_path)
    assert _outer(src) == "int"
    _cell_made_local(pyc)
    assert _outer(src) == "cell"  # locals() (and a frame's f_locals) hands out the cell, not the value
    loaded, code = marshal.loads(pyc.read_bytes()[16:]), compile(CLOSURE, str(src), "exec", dont_inherit=True)
    assert loaded == code  # what the check compares: equal
    assert [c._co_code_adaptive for c in loaded.co_consts if isinstance(c, type(code))] == [  # and PYC1's fix's
        c._co_code_adaptive for c in code.co_consts if isinstance(c, type(code))]
    assert marshal.dumps(loaded, 2) != marshal.dumps(code, 2)  # what marshal writes sees it


def test_pyc4_a_planted_pyc_whose_cell_is_declared_local_is_refused(tmp_path: Path) -> None:
    src, pyc = _closure_module(tmp_path)
    _cell_made_local(pyc)
    assert _why(src, pyc) == ["not the bytecode of its source"]


def test_pyc4_control_the_honest_pyc_of_the_closure_is_accepted(tmp_path: Path) -> None:
    assert _why(*_closure_module(tmp_path)) == []


# NPY1 ----------------------------------------------------------------------------------------------------------------
def _structure_of(path: Path) -> None:
    """What the reference step (and reread) does with an output's file: load it, then check its structure."""
    check_structure(_load_npy(path, "reference embeddings", "reference"), dtype="float32", rows=2, shape=(2, 3),
                    what="reference embeddings", layer="reference")


def test_npy1_premise_np_load_takes_a_zip_at_an_npy_path_as_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "embeddings.npy"
    with path.open("wb") as handle:  # np.savez to a file object keeps the name: an archive under an array's name
        np.savez(handle, embeddings=np.zeros((2, 3), dtype=np.float32))
    loaded = np.load(path, allow_pickle=False)  # what the step's loader called, sniffing the format
    assert not isinstance(loaded, np.ndarray)
    loaded.close()


def test_npy1_an_archive_at_an_output_path_is_refused_as_such(tmp_path: Path) -> None:
    path = tmp_path / "embeddings.npy"
    with path.open("wb") as handle:
        np.savez(handle, embeddings=np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(CheckFailed, match=r"embeddings\.npy"):
        _structure_of(path)


def test_npy1_control_a_pointer_file_and_an_array_of_another_dtype_are_refused_named(tmp_path: Path) -> None:
    path = tmp_path / "embeddings.npy"
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 10\n")
    with pytest.raises(CheckFailed, match=r"cannot read embeddings.npy"):
        _structure_of(path)
    np.save(path, np.zeros((2, 3), dtype=np.float64))
    with pytest.raises(CheckFailed, match="dtype float64, expected float32"):
        _structure_of(path)
