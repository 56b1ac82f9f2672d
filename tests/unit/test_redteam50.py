"""Red-team pass 50 (notes: /work/notes/redteam50.md): the env bound to its lock, the variables of the in-env
processes and the reference's lineage, attacked through real sessions; one finding.

PYC1 (bytecode written since the build is accepted when its code object compares EQUAL to its source's, and
CPython's code equality does not see what runs; FALSE ``env-files-unchanged``; env/inventory.bytecode_validator,
inenv/observe._bytecode_of_source): ``marshal.loads(pyc) == compile(source)`` compares each instruction by its
de-specialised opcode and oparg and skips the inline caches that follow it. CPython 3.11 executes a specialised
opcode found in a ``.pyc`` as it is: ``COMPARE_OP_FLOAT_JUMP`` decides its jump from the mask in its inline cache, so
a planted pyc with ``p < 0.0`` turned into "never" (or "always") compares equal to its source's code. Measured in a
real session on this repository: torch/nn/__pycache__/functional.cpython-311.pyc replaced by one whose ``dropout``
skips its ``p < 0.0`` check (header: the source's mtime and size) was checked by the inventory step
(``bytecode_since_build.checked_now: 1``, ``not_its_source: []``), kept in kernodeck-bytecode.json, ran in every
dropout call of the application, and verify said ``PASSED`` with ``env-files-unchanged`` established; the env's
``F.dropout(x, p=-0.5)`` then reached ATen's check instead of the source's ValueError (mask 7: every dropout raised).
Fix idea (by class: judge the bytes that run, not an equality the runtime defines loosely): compare the pyc's
payload byte for byte with ``marshal.dumps(compile(source, ...))`` (what importlib itself writes), or with
``importlib._bootstrap_external._code_to_timestamp_pyc``/``_code_to_hash_pyc`` of the compiled code; or delete
bytecode written since the build instead of keeping it. Fixed: the check compares the instruction bytes that run
(``_co_code_adaptive``, inline caches included) of every nested code object besides the equality. CONTROL: an honest
pyc (py_compile) is accepted, one with a changed constant is refused.
"""

from __future__ import annotations

import dis
import importlib.util
import marshal
import opcode
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.env.inventory import bytecode_validator

SOURCE = "def smaller(a, b):\n    if a < b:\n        return 'smaller'\n    return 'not smaller'\n"
SPECIALISED = getattr(dis, "_all_opmap", {}).get("COMPARE_OP_FLOAT_JUMP")
pytestmark = pytest.mark.skipif(SPECIALISED is None, reason="CPython 3.11's COMPARE_OP_FLOAT_JUMP (the env's Python)")


def _module(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "rt50mod.py"
    src.write_text(SOURCE, encoding="utf-8")
    return src, Path(importlib.util.cache_from_source(str(src)))


def _planted(src: Path, pyc: Path) -> None:
    """The honest pyc with its float comparison specialised and its jump mask inverted (jump when smaller)."""
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    data = pyc.read_bytes()
    code = compile(SOURCE, str(src), "exec", dont_inherit=True)
    raw = code.co_consts[0].co_code
    at = raw.index(bytes([opcode.opmap["COMPARE_OP"], 0]))
    new = bytearray(raw)
    new[at], new[at + 4:at + 6] = SPECIALISED, (1).to_bytes(2, "little")  # cache[1]: the mask (1 = jump if less)
    assert data.count(raw) == 1
    pyc.write_bytes(data.replace(raw, bytes(new)))


def _run(src: Path) -> str:
    probe = f"import sys; sys.path.insert(0, {str(src.parent)!r}); import rt50mod; print(rt50mod.smaller(1.0, 2.0))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def test_pyc1_premise_the_planted_pyc_runs_another_program_and_compares_equal(tmp_path: Path) -> None:
    src, pyc = _module(tmp_path)
    _planted(src, pyc)
    assert _run(src) == "not smaller"  # the source says "smaller": what runs is the pyc's
    code = compile(SOURCE, str(src), "exec", dont_inherit=True)
    assert marshal.loads(pyc.read_bytes()[16:]) == code  # the equality the check relies on


def test_pyc1_planted_specialised_bytecode_is_refused(tmp_path: Path) -> None:
    src, pyc = _module(tmp_path)
    _planted(src, pyc)
    assert bytecode_validator(sys.executable)([(str(pyc), str(src))]) != []


def test_pyc1_control_honest_pyc_accepted_changed_constant_refused(tmp_path: Path) -> None:
    src, pyc = _module(tmp_path)
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    validate = bytecode_validator(sys.executable)
    assert _run(src) == "smaller"
    assert validate([(str(pyc), str(src))]) == []
    pyc.write_bytes(pyc.read_bytes().replace(b"not smaller", b"NOT smaller"))
    assert [why for _, why in validate([(str(pyc), str(src))])] == ["not the bytecode of its source"]


def test_pyc1_class_a_renamed_qualified_name_equality_skips_is_refused(tmp_path: Path) -> None:
    """The same class, another field code equality skips: a function's ``__qualname__`` (what pickle looks it up by)."""
    src, pyc = _module(tmp_path)
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    data = pyc.read_bytes()
    module = marshal.loads(data[16:])
    func = module.co_consts[0].replace(co_qualname="elsewhere")
    renamed = module.replace(co_consts=tuple(func if c is module.co_consts[0] else c for c in module.co_consts))
    assert renamed == module  # the equality alone cannot see it
    pyc.write_bytes(data[:16] + marshal.dumps(renamed))
    assert [why for _, why in bytecode_validator(sys.executable)([(str(pyc), str(src))])] == [
        "not the bytecode of its source"]
