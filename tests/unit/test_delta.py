"""What decides the CPU kernels is recorded in system.json, and `compare` names the field that differs."""

from __future__ import annotations

import json
from pathlib import Path

from kernodeck.dossier.delta import compare, render_compare

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
microcode\t: 0x2b000590
flags\t\t: fpu sse4_1 sse4_2 avx avx2 fma f16c hypervisor smep avx512f avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
vendor_id\t: SomethingElse
"""

ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes sha1 asimddp sve sve2 bf16 i8mm
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
"""


def test_x86_identity_from_cpuinfo() -> None:
    from kernodeck.inenv.system import cpu_identity

    cpu = cpu_identity(X86)
    assert (cpu["vendor"], cpu["family"], cpu["model"], cpu["stepping"]) == ("GenuineIntel", "6", "143", "8")
    assert cpu["isa_flags"] == sorted(
        ["sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"]
    )
    assert "smep" not in cpu["isa_flags"] and "fpu" not in cpu["isa_flags"]  # security/legacy flags are not ISA
    assert cpu["hypervisor"]  # a VM name, "none", or "present (type not readable)": never dropped


def test_arm_identity_from_cpuinfo() -> None:
    from kernodeck.inenv.system import cpu_identity

    cpu = cpu_identity(ARM)
    assert (cpu["vendor"], cpu["model"], cpu["stepping"]) == ("0x41", "0xd40", "0x1")
    assert {"asimd", "asimddp", "sve", "sve2", "bf16", "i8mm"} <= set(cpu["isa_flags"])
    assert "aes" not in cpu["isa_flags"]


def test_unreadable_fields_are_recorded_with_a_reason() -> None:
    from kernodeck.inenv.system import cpu_identity

    cpu = cpu_identity("processor\t: 0\n")
    assert cpu["vendor"] == {"unavailable": "not in /proc/cpuinfo"}
    assert cpu["isa_flags"] == []


def _dossier(path: Path, status: str, system: dict[str, object] | None) -> Path:
    path.mkdir()
    (path / "report.json").write_text(json.dumps({"status": status, "platform": "p", "steps": []}))
    if system is not None:
        (path / "system.json").write_text(json.dumps(system))
    return path


def test_compare_names_the_cpu_fields_that_differ(tmp_path: Path) -> None:
    base = {"torch_version": "2.13.0+cpu", "cpu": {"vendor": "AuthenticAMD", "isa_flags": ["avx2", "avx512f"]}}
    other = {
        "torch_version": "2.13.0+cpu",
        "cpu": {"vendor": "GenuineIntel", "isa_flags": ["avx2", "amx_tile"]},
        "torch_cpu_capability": "AVX512",
    }
    a = _dossier(tmp_path / "a", "passed", base)
    b = _dossier(tmp_path / "b", "failed", other)
    text = render_compare(compare(a, b))
    assert "- `cpu.isa_flags`: only in A: avx512f; only in B: amx_tile" in text
    assert '- `cpu.vendor`: "AuthenticAMD" → "GenuineIntel"' in text
    assert '- `torch_cpu_capability`: null → "AVX512"' in text
    assert "torch_version" not in text  # equal fields are not listed

    same = render_compare(compare(a, _dossier(tmp_path / "c", "passed", base)))
    assert "cpu." not in same and "## System\n\nno difference" in same


def test_compare_of_a_run_that_stopped_early_lists_no_nulls(tmp_path: Path) -> None:
    a = _dossier(tmp_path / "a", "passed", {"torch_version": "2.13.0+cpu", "kernel": "6.1", "cpu": {"vendor": "x"}})
    b = _dossier(tmp_path / "b", "failed", None)
    text = render_compare(compare(a, b))
    assert "→ null" not in text
    assert "not compared: system.json is not in B" in text


# --- what compare reads is what the runs wrote (red-team pass 44: a replaced output was compared as it was) -----------


def _signed(path: Path, lock_digest: str) -> Path:
    """A run's dossier as Kernodeck leaves it: its report naming its lock, an output, the folder signed."""
    from kernodeck import outdir

    path.mkdir()
    (path / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": [],
                                                  "lock_digest": lock_digest}))
    (path / "outputs").mkdir()
    (path / "outputs" / "x.npy").write_bytes(b"\x93NUMPY the run's bytes")
    outdir.mark(path, "dossier")
    return path


def test_compare_names_an_output_changed_since_the_run_wrote_it(tmp_path: Path) -> None:
    a, b = _signed(tmp_path / "a", "sha256:1"), _signed(tmp_path / "b", "sha256:1")
    (b / "outputs" / "x.npy").write_bytes(b"\x93NUMPY other bytes")
    (a / "notes.md").write_text("the user's notes\n")  # added beside the run's files: no change to what it wrote
    result = compare(a, b)
    assert result["changed_since_written"] == {"a": [], "b": ["outputs/x.npy (changed since Kernodeck wrote it)"]}
    assert "NOT AS WRITTEN: B" in render_compare(result) and "NOT AS WRITTEN: A" not in render_compare(result)


def test_compare_names_a_missing_output_and_an_unsigned_dossier(tmp_path: Path) -> None:
    a, b = _signed(tmp_path / "a", "sha256:1"), _dossier(tmp_path / "b", "passed", None)
    (a / "outputs" / "x.npy").unlink()
    found = compare(a, b)["changed_since_written"]
    assert found["a"] == ["outputs/x.npy (missing)"] and found["b"][0].startswith("no record of its files")


def test_compare_of_runs_as_written_says_nothing_of_it(tmp_path: Path) -> None:
    """Control: two signed runs untouched."""
    result = compare(_signed(tmp_path / "a", "sha256:1"), _signed(tmp_path / "b", "sha256:1"))
    assert result["changed_since_written"] == {"a": [], "b": []}
    assert "NOT AS WRITTEN" not in render_compare(result) and "(other locks)" not in render_compare(result)


def test_compare_shows_two_runs_other_locks(tmp_path: Path) -> None:
    """Two lock bodies with the same versions but other wheels: the inventories read identical, the locks do not."""
    text = render_compare(compare(_signed(tmp_path / "a", "sha256:1"), _signed(tmp_path / "b", "sha256:2")))
    assert "- lock: `sha256:1` vs `sha256:2` (other locks)" in text and "## Inventory\n\nidentical" in text


def test_compare_names_a_reference_whose_output_differs_from_its_manifest(tmp_path: Path) -> None:
    import shutil

    from tests.helpers.project import ROOT

    ref = tmp_path / "reference"
    shutil.copytree(ROOT / "dossier" / "reference", ref)
    assert compare(ref, ref)["changed_since_written"] == {"a": [], "b": []}  # control: as committed
    (ref / "embeddings.npy").write_bytes((ref / "embeddings.npy").read_bytes()[:-4] + b"\0\0\0\0")
    assert compare(ref, ref)["changed_since_written"]["a"] == ["embeddings.npy does not match the manifest's digest"]


def test_compare_names_an_output_added_to_a_signed_run(tmp_path: Path) -> None:
    """An output file the run never wrote, put into its outputs/ afterwards, is read by compare: named as added."""
    a, b = _signed(tmp_path / "a", "sha256:1"), _signed(tmp_path / "b", "sha256:1")
    (b / "outputs" / "y.npy").write_bytes(b"\x93NUMPY put here later")
    assert compare(a, b)["changed_since_written"]["b"] == ["outputs/y.npy (added since Kernodeck wrote the folder)"]
