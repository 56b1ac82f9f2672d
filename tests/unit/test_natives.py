"""The env's native readers and writers (safetensors, tokenizers, torch's C++ loaders and savers) show the closed world
what they read and write (inenv/natives.py).

Their reads make no audit event, so an undeclared weights or tokenizer file passed unseen (red-team pass 13, NOTE 5),
and an undeclared TorchScript model loaded by ``torch.jit.load`` (pass 15, HOLE 6); their writes neither, so a file
``torch.save`` wrote was an undeclared input when read back, and such a write into a checked file was not refused
(pass 16, FF1/FP2/FP3). Stand-ins of the packages in the test's fake env read and write nothing the hook hears, as the
native ones: without the wrap their reads pass unseen and their files are inputs (the controls), with it each
undeclared file read is named, a declared one passes, a file written is the application's own and a write onto a
declared source is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import natives
from kernodeck.project import app_contract
from tests.helpers.closedworld import _script, _settings_project
from tests.helpers.nativestandins import ENTRY, PACKAGES, standins


# the entry's window as the application step opens it, the packages imported before (in the real env they are the
# env's files, trusted: here the fake env's, imported outside any window as Kernodeck's own imports would be)
def _run(tmp_path: Path, config: dict[str, Any], fake: Path, imported: list[str]) -> dict[str, Any]:
    done = _script(tmp_path, config, ENTRY, flags=[str(fake), *imported])
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result

READS = {
    "safetensors.torch.load_file": "import safetensors.torch; safetensors.torch.load_file(str(ROOT / 'data' / 'w.st'))",
    "safe_open, framework positional": (
        "from safetensors import safe_open; safe_open(str(ROOT / 'data' / 'w.st'), 'pt').__enter__()"),
    "Tokenizer.from_file": "import tokenizers; tokenizers.Tokenizer.from_file(str(ROOT / 'data' / 'w.st'))",
    "BPE.from_file (keywords)": ("from tokenizers.models import BPE; BPE.from_file(vocab=str(ROOT / 'data' / 'w.st'), "
                                 "merges=str(ROOT / 'data' / 'w.st'))"),
    # the models' constructors given file names (red-team pass 14, HOLE 3)
    "WordPiece(vocab)": "from tokenizers.models import WordPiece; WordPiece(str(ROOT / 'data' / 'w.st'))",
    "BPE(vocab=, merges=)": ("from tokenizers.models import BPE; BPE(vocab=str(ROOT / 'data' / 'w.st'), "
                             "merges=str(ROOT / 'data' / 'w.st'))"),
    "WordLevel(vocab, unk_token=)": ("from tokenizers.models import WordLevel; "
                                     "WordLevel(ROOT / 'data' / 'w.st', unk_token='[UNK]')"),
    "BertWordPieceTokenizer(vocab)": ("from tokenizers.implementations import BertWordPieceTokenizer; "
                                      "BertWordPieceTokenizer(str(ROOT / 'data' / 'w.st'))"),
    "ByteLevelBPETokenizer(vocab, merges)": ("from tokenizers.implementations import ByteLevelBPETokenizer; "
                                             "ByteLevelBPETokenizer(str(ROOT / 'data' / 'w.st'), "
                                             "str(ROOT / 'data' / 'w.st'))"),
    # torch's C++ loaders (red-team pass 15, HOLE 6)
    "torch.jit.load": "import torch.jit; torch.jit.load(str(ROOT / 'data' / 'w.st'), map_location='cpu')",
    "torch.jit._serialization.load (f=)": ("from torch.jit._serialization import load; "
                                           "load(f=ROOT / 'data' / 'w.st')"),
    "torch.export.load (PathLike)": "import torch.export; torch.export.load(ROOT / 'data' / 'w.st')",
    "torch.package.PackageImporter": ("from torch.package import PackageImporter; "
                                      "PackageImporter(str(ROOT / 'data' / 'w.st'))"),
    # more of torch's C++ readers (red-team pass 17, FP1)
    "torch.jit.jit_module_from_flatbuffer": ("import torch.jit; "
                                             "torch.jit.jit_module_from_flatbuffer(str(ROOT / 'data' / 'w.st'))"),
    "PT2ArchiveReader": ("from torch.export.pt2_archive import PT2ArchiveReader; "
                         "PT2ArchiveReader(str(ROOT / 'data' / 'w.st'))"),
    "torch.jit.mobile._load_for_lite_interpreter (PathLike)": (
        "import torch.jit.mobile as m; m._load_for_lite_interpreter(ROOT / 'data' / 'w.st')"),
    "torch.jit.mobile._get_model_bytecode_version": (
        "import torch.jit.mobile as m; m._get_model_bytecode_version(str(ROOT / 'data' / 'w.st'))"),
    # a file mapped into a tensor, not shared: read (red-team pass 16)
    "torch.from_file (shared=False)": ("import torch; "
                                       "torch.from_file(str(ROOT / 'data' / 'w.st'), shared=False, size=1)"),
    "torch.UntypedStorage.from_file": "import torch; torch.UntypedStorage.from_file(ROOT / 'data' / 'w.st', False, 7)",
    "torch.TypedStorage.from_file": "import torch; torch.TypedStorage.from_file(str(ROOT / 'data' / 'w.st'))",
}
# the native writers (red-team pass 16), each given the path {P} (a str or a PathLike) to write
WRITES = {
    "torch.save": "import torch; torch.save({{'w': 0}}, str({P}))",
    "torch.serialization.save (f=, PathLike)": "from torch.serialization import save; save({{'w': 0}}, f={P})",
    "torch.jit.save": "import torch.jit; torch.jit.save(torch.jit.RecursiveScriptModule(), {P})",
    "scripted.save": "import torch.jit; torch.jit.RecursiveScriptModule().save(str({P}))",
    "traced.save": "import torch.jit._script as s; type('TracedModule', (s.ScriptModule,), {{}})().save({P})",
    "torch.export.save": "import torch.export; torch.export.save(None, str({P}))",
    "torch.package.PackageExporter": "from torch.package import PackageExporter; PackageExporter({P})",
    "safetensors.torch.save_file": "import safetensors.torch; safetensors.torch.save_file({{}}, str({P}))",
    "safetensors.torch.save_model": "import safetensors.torch; safetensors.torch.save_model(None, str({P}))",
    "safetensors.numpy.save_file (PathLike)": "import safetensors.numpy; safetensors.numpy.save_file({{}}, {P})",
    "safetensors.serialize_file (filename=)": "import safetensors; safetensors.serialize_file({{}}, filename=str({P}))",
    # more of torch's C++ writers (red-team pass 17, FF2)
    "torch.jit.save_jit_module_to_flatbuffer": ("import torch.jit; "
                                                "torch.jit.save_jit_module_to_flatbuffer(None, str({P}))"),
    "scripted._save_for_lite_interpreter": ("import torch.jit; "
                                            "torch.jit.RecursiveScriptModule()._save_for_lite_interpreter({P})"),
    "a scripted function's save": "import torch; torch._C.ScriptFunction().save(str({P}))",
    "PT2ArchiveWriter": "from torch.export.pt2_archive import PT2ArchiveWriter; PT2ArchiveWriter(str({P}))",
    "profiler export_chrome_trace": "import torch.autograd.profiler as p; p.profile().export_chrome_trace(str({P}))",
    "ExecutionTraceObserver.register_callback": ("import torch.profiler as p; "
                                                 "p.ExecutionTraceObserver().register_callback(str({P}))"),
    "torch.from_file (shared=True)": "import torch; torch.from_file(str({P}), shared=True, size=1)",
    "torch.from_file (shared positional)": "import torch; torch.from_file({P}, True, 1)",
    "torch.UntypedStorage.from_file (shared)": "import torch; torch.UntypedStorage.from_file(str({P}), True, 1)",
    "torch.TypedStorage.from_file (shared=)": "import torch; torch.TypedStorage.from_file({P}, shared=True, size=1)",
}
# written into a temporary folder (outside the project and the env), then read back through Python
INTO_TMP = ("import tempfile, pathlib; d = pathlib.Path(tempfile.mkdtemp()); {write}; "
            "assert (d / 'f.bin').read_bytes()")


def _project(tmp_path: Path, doing: str, files: list[str], *, packages: bool = True) -> tuple[dict[str, Any], Path]:
    config, fake = _settings_project(tmp_path, entry=doing)
    root = Path(config["project_root"])
    (root / "data" / "w.st").write_bytes(b"weights")
    if packages:
        standins(fake)
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": files,
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    return config, fake


@pytest.mark.parametrize("how", sorted(READS))
def test_a_file_a_rust_reader_opens_is_judged_as_an_open(tmp_path: Path, how: str) -> None:
    config, fake = _project(tmp_path, READS[how], ["data/*.csv"])
    result = _run(tmp_path, config, fake, PACKAGES)
    assert result["status"] == "failed", result
    assert result["error"].startswith("the entry read files that are not declared sources: data/w.st (opened)"), result
    # declared, the same read passes
    config, fake = _project(tmp_path / "declared", READS[how], ["data/*.csv", "data/w.st"])
    assert _run(tmp_path / "declared", config, fake, PACKAGES) == {"status": "passed"}


# the packages imported only once the closed world is installed (by the entry's first window), some from a folder put
# on sys.path only then: in the real env they are the env's files, imported inside the application's window; here
# the fake env's, imported between windows as Kernodeck's own imports would be
LATER = ENTRY.replace("for name in sys.argv[5:]:\n    __import__(name)\n", "", 1).replace(
    "    world.forget()\n",
    "    world.forget()\n    application._function(ctx, config['application']['entry'], 'entry')\n"
    "    sys.path.insert(0, sys.argv[4] + '/later')\n    for name in sys.argv[5:]:\n        __import__(name)\n", 1)


def _later(tmp_path: Path, doing: str, script: str = LATER) -> dict[str, Any]:
    """``doing`` as the entry, the stand-in packages importable only after the closed world installed its wrappers."""
    config, fake = _project(tmp_path, doing, ["data/*.csv"])
    (fake / "later").mkdir()
    for package in ("safetensors", "tokenizers"):
        (fake / package).rename(fake / "later" / package)
    done = _script(tmp_path, config, script, flags=[str(fake), *PACKAGES])
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("how", ["safetensors.torch.load_file", "Tokenizer.from_file", "PT2ArchiveReader",
                                 "torch.jit.mobile._get_model_bytecode_version", "BPE(vocab=, merges=)"])
def test_a_reader_whose_module_is_imported_after_the_install_is_wrapped_as_it_is_imported(
        tmp_path: Path, how: str) -> None:
    """A reader's module imported after the install (a package put on sys.path only then, or one of natives.LATER,
    not imported for the wrap) is wrapped as it is imported, before the import returns, so its read is named."""
    result = _later(tmp_path, READS[how])
    assert result["status"] == "failed", result
    assert result["error"].startswith("the entry read files that are not declared sources: data/w.st (opened)"), result


def test_without_its_rows_a_reader_imported_later_is_unseen(tmp_path: Path) -> None:
    """The control: the stand-ins read nothing through Python, as the Rust readers. Imported as late, safetensors'
    rows dropped from NATIVES before the install, its read passes unseen."""
    dropped = LATER.replace("import torch\n", "import torch\nfrom kernodeck_inenv import natives\nnatives.NATIVES = "
                            "tuple(r for r in natives.NATIVES if r.module != 'safetensors')\n", 1)
    assert _later(tmp_path, READS["safetensors.torch.load_file"], dropped) == {"status": "passed"}


def test_the_install_imports_no_costly_readers_module(tmp_path: Path) -> None:
    """The wrap does not import a module of :data:`natives.LATER` (torch.export.pt2_archive cost a verify 0.18 s):
    importable, it stays unimported (the application's own import, if any, brings it in, wrapped then), while the
    others are imported as before (the control: safetensors, its stand-in importable here)."""
    config, fake = _project(tmp_path, "pass", ["data/*.csv"])
    script = ENTRY.replace("for name in sys.argv[5:]:\n    __import__(name)\n",
                           "from kernodeck_inenv import natives\nbefore = set(sys.modules)\nnatives.install()\n"
                           "print(json.dumps(sorted(set(sys.modules) - before))); raise SystemExit\n", 1)
    done = _script(tmp_path, config, script, flags=[str(fake)])
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert "safetensors" in imported and "tokenizers.models" in imported, (imported, done.stderr)
    assert not [name for name in imported if name in natives.LATER], imported


# made by the wrapped constructors: the original class's objects, as the caller asked for them
MADE = ("from tokenizers.models import BPE, WordPiece, WordLevel; "
        "made = [WordPiece({'[UNK]': 0}, unk_token='[UNK]'), BPE(vocab={'a': 0}, merges=[]), WordLevel(), BPE()]; "
        "assert [type(m).__name__ for m in made] == ['WordPiece', 'BPE', 'WordLevel', 'BPE'], made; "
        "assert made[0].vocab == {'[UNK]': 0} and made[1].merges == [] and made[3].vocab is None, made; "
        "assert all(isinstance(m, (BPE, WordPiece)) for m in made)")


def test_a_models_constructor_given_no_file_reads_nothing_and_makes_its_object(tmp_path: Path) -> None:
    """The control of the constructors' rows: given a vocabulary in memory (a dict) or nothing, the wrapped
    constructors report no file and make the original class's object with its arguments."""
    config, fake = _project(tmp_path, MADE, ["data/*.csv"])
    assert _run(tmp_path, config, fake, PACKAGES) == {"status": "passed"}


# the jit row dropped before the closed world installs its wrappers: torch.jit.load is the original
UNWRAPPED = ENTRY.replace("import torch\n", "import torch\nfrom kernodeck_inenv import natives\n"
                          "natives.NATIVES = tuple(r for r in natives.NATIVES if r.module != 'torch.jit')\n", 1)


def test_without_its_row_a_torch_jit_load_is_unseen(tmp_path: Path) -> None:
    """The control of the torch rows: the same stand-in, its NATIVES row dropped, reads the undeclared file unseen
    (as every torch.jit.load did before red-team pass 15)."""
    config, fake = _project(tmp_path, READS["torch.jit.load"], ["data/*.csv"])
    done = _script(tmp_path, config, UNWRAPPED, flags=[str(fake), *PACKAGES])
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": "passed"}, done.stderr


def test_a_torch_loader_given_a_file_like_object_reports_no_path(tmp_path: Path) -> None:
    """A file-like object is no path: the wrapped loaders report none (what Python reads from an opened file was
    judged as it was opened) and pass it on to the original."""
    made = ("import io, torch.jit, torch.export; from torch.package import PackageImporter; "
            "assert torch.jit.load(io.BytesIO(b'a')) == b'a' and torch.export.load(io.BytesIO(b'b')) == b'b'; "
            "assert PackageImporter(io.BytesIO(b'c')).data == b'c'")
    config, fake = _project(tmp_path, made, ["data/*.csv"])
    assert _run(tmp_path, config, fake, PACKAGES) == {"status": "passed"}


# the writer rows dropped before the closed world installs its wrappers: the writers are the originals
NO_WRITERS = ENTRY.replace("import torch\n", "import torch\nfrom kernodeck_inenv import natives\nnatives.NATIVES = "
                           "tuple(r for r in natives.NATIVES if r.mode == 'r' and r.shared is None)\n", 1)


@pytest.mark.parametrize("how", sorted(WRITES))
def test_a_file_a_native_writer_made_is_the_applications_own(tmp_path: Path, how: str) -> None:
    """Written by a native writer into a temporary folder, then read back: the application's own output, not an
    input (red-team pass 16, FF1). The control: its row dropped, the write is unseen and the read back is judged an
    undeclared input, as every such round trip was before."""
    doing = INTO_TMP.format(write=WRITES[how].format(P="(d / 'f.bin')"))
    config, fake = _project(tmp_path, doing, ["data/*.csv"])
    assert _run(tmp_path, config, fake, PACKAGES) == {"status": "passed"}
    config, fake = _project(tmp_path / "control", doing, ["data/*.csv"])
    done = _script(tmp_path / "control", config, NO_WRITERS, flags=[str(fake), *PACKAGES])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "failed" and "f.bin (opened)" in result["error"], (result, done.stderr)


@pytest.mark.parametrize("how", sorted(WRITES))
def test_a_native_write_onto_a_declared_source_is_refused(tmp_path: Path, how: str) -> None:
    """A native write onto what the run relies on as checked (here a declared source) is refused at once, as a
    Python ``open(path, "w")`` is (red-team pass 16, FP2): the writer is never called, the file keeps its bytes."""
    config, fake = _project(tmp_path, WRITES[how].format(P="(ROOT / 'data' / 'w.st')"), ["data/*.csv", "data/w.st"])
    result = _run(tmp_path, config, fake, PACKAGES)
    assert result["status"] == "failed" and "changed a declared source, data/w.st" in result["error"], result
    assert (Path(config["project_root"]) / "data" / "w.st").read_bytes() == b"weights"


def test_a_native_writer_given_a_file_like_object_reports_no_path(tmp_path: Path) -> None:
    """A file-like object is no path: the wrapped writers report none (Python writes what was opened, judged as it
    was opened) and pass it on to the original."""
    made = ("import io, torch, torch.jit, torch.export; from torch.package import PackageExporter; "
            "b = [io.BytesIO() for _ in range(4)]; torch.save({}, b[0]); "
            "torch.jit.save(torch.jit.RecursiveScriptModule(), b[1]); torch.export.save(None, f=b[2]); "
            "PackageExporter(b[3]); "
            "assert [x.getvalue() for x in b] == [b'saved', b'module', b'program', b'package'], b")
    config, fake = _project(tmp_path, made, ["data/*.csv"])
    assert _run(tmp_path, config, fake, PACKAGES) == {"status": "passed"}
