"""A model's own code in the Hugging Face modules cache (trust_remote_code, red-team pass 16's FF4), in process: a file
there counts as the declared source whose bytes the interpreter compiled from it, or as an empty ``__init__.py``;
any other file there stays undeclared. No env needed: a fake modules cache under tmp_path (``HF_MODULES_CACHE``),
loaded as transformers loads it (``spec_from_file_location`` + ``exec_module``, the packages by import)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import declared_files, leftover, world
from kernodeck.inenv._common import CheckFailed, Context
from kernodeck.inenv.declared_files import in_sources

CODE = b"VALUE = 41\n\n\ndef value():\n    return VALUE + 1\n"
PACKAGE = "transformers_modules"


@pytest.fixture(autouse=True)
def _fresh_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No earlier test's ``transformers_modules`` in sys.modules, no bytecode written beside the fake cache."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(declared_files, "COMPILED", {})
    monkeypatch.setattr(declared_files, "SEEN", {}, raising=False)
    for name in [n for n in sys.modules if n.split(".")[0] == PACKAGE]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == PACKAGE]:
        del sys.modules[name]
    importlib.invalidate_caches()


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: bytes = CODE,
             init: bytes = b"") -> tuple[Context, Path]:
    """A project declaring ``data/remote/configuration_x.py`` (``code``) and a modules cache holding its copy
    ``transformers_modules/remote/abc123/configuration_x.py`` (``code`` here), each folder with an empty ``__init__.py``
    but its own, ``init``. The cache's folder on sys.path, as transformers' init_hf_modules puts it."""
    root = tmp_path / "project"
    (root / "data" / "remote").mkdir(parents=True)
    (root / "data" / "remote" / "configuration_x.py").write_bytes(CODE)
    (root / "sample.jsonl").write_text('{"id": "a"}\n')
    cache = tmp_path / "modules"
    leaf = cache / PACKAGE / "remote" / "abc123"
    leaf.mkdir(parents=True)
    for folder in (cache, cache / PACKAGE, cache / PACKAGE / "remote", leaf):
        (folder / "__init__.py").write_bytes(init if folder == leaf else b"")
    (leaf / "configuration_x.py").write_bytes(code)
    monkeypatch.setenv("HF_MODULES_CACHE", str(cache))
    monkeypatch.setattr(leftover, "BEFORE_APPLICATION", [None])  # the process "starts" with it: its first window
    monkeypatch.syspath_prepend(str(cache))
    importlib.invalidate_caches()
    config = {"project_root": str(root), "application": {
        "sample": "sample.jsonl", "sources": {"data/remote/configuration_x.py": hashlib.sha256(CODE).hexdigest()}}}
    return Context(config=config, out=tmp_path / "out"), leaf / "configuration_x.py"


def _load_like_transformers(file: Path) -> Any:
    """transformers' get_class_in_module: the file read to hash it, loaded by path; its packages by import."""
    importlib.import_module(f"{PACKAGE}.remote.abc123")
    file.read_bytes()
    spec = importlib.util.spec_from_file_location(f"{PACKAGE}.remote.abc123.configuration_x", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_copy_of_a_declared_file_in_the_modules_cache_is_that_declared_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FF4: the copy (byte-identical to the declared file) and the empty ``__init__.py`` files are accounted for;
    the record names the declared file each copy matched. A later window of the same process that only reads the
    copy (transformers hashing it, the module already loaded) is judged by the compile before it."""
    ctx, copy = _project(tmp_path, monkeypatch)
    with world.window(ctx, "the entry"):
        assert _load_like_transformers(copy).value() == 42
    found = ctx.state["cached_code"]
    assert found[os.path.realpath(copy)] == "data/remote/configuration_x.py"
    assert found[os.path.realpath(copy.parent / "__init__.py")] == "an empty __init__.py"
    with world.window(ctx, "the criterion"):
        copy.read_bytes()


@pytest.mark.parametrize("how", ["one byte changed", "a non-empty __init__.py", "a file matching nothing",
                                 "only read, one byte changed"])
def test_any_other_file_in_the_modules_cache_is_undeclared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           how: str) -> None:
    """The negatives: a copy one byte off the declared file, a non-empty ``__init__.py``, a module that is no
    declared file's copy, a changed copy only read: each refused, named, with the cache's advice."""
    code, init = {"one byte changed": (CODE.replace(b"41", b"40"), b""),
                  "only read, one byte changed": (CODE.replace(b"41", b"40"), b""),
                  "a non-empty __init__.py": (CODE, b"X = 1\n")}.get(how, (CODE, b""))
    ctx, copy = _project(tmp_path, monkeypatch, code=code, init=init)
    stranger = copy.parent / "other.py"
    stranger.write_bytes(b"OTHER = 1\n")
    named = {"one byte changed": copy, "a non-empty __init__.py": copy.parent / "__init__.py",
             "a file matching nothing": stranger, "only read, one byte changed": copy}[how]
    with pytest.raises(CheckFailed) as caught, world.window(ctx, "the entry"):
        if how == "only read, one byte changed":
            copy.read_bytes()
        else:
            _load_like_transformers(copy)
        if how == "a file matching nothing":
            importlib.import_module(f"{PACKAGE}.remote.abc123.other")
    message = str(caught.value)
    assert f"{os.path.realpath(named)} (" in message and "Hugging Face modules cache" in message, message
    assert [f["file"] for f in caught.value.details["undeclared"]] == [os.path.realpath(named)], message
    assert os.path.realpath(named) not in ctx.state.get("cached_code", {})


def test_a_copy_only_read_counts_by_its_bytes_unchanged_since(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """FF5: a declared module's copy only read (transformers hashing a lazily imported module) is that declared
    source; the negatives: a copy changed after it was read (given the declared bytes back, or changed for good) is
    refused, as is one changed after it was compiled (what was read or ran is not what the judgement hashes)."""
    ctx, copy = _project(tmp_path / "a", monkeypatch)
    with world.window(ctx, "the entry"):
        copy.read_bytes()
    assert ctx.state["cached_code"][os.path.realpath(copy)] == "data/remote/configuration_x.py"
    ctx, copy = _project(tmp_path / "b", monkeypatch, code=CODE.replace(b"41", b"40"))
    with pytest.raises(CheckFailed, match=r"abc123/configuration_x\.py \(opened\)"), world.window(ctx, "the entry"):
        copy.read_bytes()
        copy.write_bytes(CODE)  # the declared bytes back before the judgement: not what was read
    ctx, copy = _project(tmp_path / "c", monkeypatch, code=CODE.replace(b"41", b"40"))
    with pytest.raises(CheckFailed, match=r"abc123/configuration_x\.py \(imported\)"), world.window(ctx, "the entry"):
        assert _load_like_transformers(copy).value() == 41
        copy.write_bytes(CODE)
    sys.modules.pop(f"{PACKAGE}.remote.abc123.configuration_x")
    ctx, copy = _project(tmp_path / "d", monkeypatch)
    with world.window(ctx, "the entry"):
        assert _load_like_transformers(copy).value() == 42
    copy.write_bytes(CODE.replace(b"41", b"40"))
    assert declared_files.cache_copy(ctx, os.path.realpath(copy)) is None


@pytest.mark.parametrize("changed", [False, True])
def test_a_forked_child_judges_a_copy_it_reads_by_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            changed: bool) -> None:
    """A forked child judges each read at once: a true copy only read there passes (no compile needed), a copy one
    byte off is refused."""
    ctx, copy = _project(tmp_path, monkeypatch, code=CODE.replace(b"41", b"40") if changed else CODE)

    def read_in_a_child() -> None:
        with world.window(ctx, "the entry"):
            pid = os.fork()
            if pid == 0:
                try:
                    copy.read_bytes()
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)

    if changed:
        with pytest.raises(CheckFailed, match=r"abc123/configuration_x\.py"):
            read_in_a_child()
    else:
        read_in_a_child()


def test_a_compile_counts_only_of_the_files_own_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FP4: the declared bytes (or b"" for an ``__init__.py``) compiled under the name of a cache file holding other
    bytes do not make it a copy (the builtin ``compile``, not the import system); the control: the file's own
    declared bytes compiled under its name do; and other bytes compiled under a true copy's name unmake it."""
    ctx, copy = _project(tmp_path, monkeypatch)
    other = copy.parent / "other.py"
    other.write_bytes(b"OTHER = 1\n")
    init = copy.parent / "extra" / "__init__.py"
    init.parent.mkdir()
    init.write_bytes(b"X = 1\n")
    with pytest.raises(CheckFailed) as caught, world.window(ctx, "the entry"):
        compile(CODE, str(other), "exec")
        compile(b"", str(init), "exec")
        other.read_bytes()
        init.read_bytes()
    assert sorted(f["file"] for f in caught.value.details["undeclared"]) == sorted(
        os.path.realpath(p) for p in (init, other))
    with world.window(ctx, "the entry"):
        compile(CODE, str(copy), "exec")
        copy.read_bytes()
    assert ctx.state["cached_code"][os.path.realpath(copy)] == "data/remote/configuration_x.py"
    with pytest.raises(CheckFailed, match=r"abc123/configuration_x\.py \(opened\)"), world.window(ctx, "the entry"):
        compile(b"VALUE = 40\n", str(copy), "exec")  # other bytes under the copy's name: not what the file holds
        copy.read_bytes()


def test_the_cache_is_where_the_process_started_and_never_in_the_project(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """FP4: ``HF_MODULES_CACHE`` pointed elsewhere by the application does not move the cache (located from the
    environment the process started with); a cache the process started with inside the project (or a declared
    source's folder) is none: a project file there is judged as a project file. The control: the cache as started."""
    ctx, copy = _project(tmp_path / "a", monkeypatch)
    root = Path(ctx.config["project_root"])
    (root / "notes.txt").write_bytes(CODE)  # a declared file's bytes, undeclared here
    with pytest.raises(CheckFailed, match=r"notes\.txt \(opened\)"), world.window(ctx, "the entry"):
        os.environ["HF_MODULES_CACHE"] = str(root)
        compile(CODE, str(root / "notes.txt"), "exec")
        (root / "notes.txt").read_bytes()
    assert declared_files.in_modules_cache(str(copy)) and not declared_files.in_modules_cache(str(root / "x"))
    monkeypatch.setattr(leftover, "BEFORE_APPLICATION", [None])
    monkeypatch.setenv("HF_MODULES_CACHE", str(root))  # now as the process started
    with pytest.raises(CheckFailed, match=r"notes\.txt \(opened\)"), world.window(ctx, "the entry"):
        (root / "notes.txt").read_bytes()
    assert declared_files.in_modules_cache(str(root / "notes.txt"))
    assert not declared_files.in_cache_here(ctx, os.path.realpath(root / "notes.txt"))


def test_a_weights_sources_file_is_matched_too_and_only_in_the_modules_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's code declared in the ``weights`` source's fingerprint is matched (named by its path); the same
    bytes compiled from a file outside the modules cache are not a cache copy (judged as any file outside)."""
    ctx, copy = _project(tmp_path, monkeypatch)
    weights = tmp_path / "weights"
    ctx.config["application"]["sources"] = {}
    ctx.state.update(weights=str(weights), weights_fingerprint={"configuration_x.py": hashlib.sha256(CODE).hexdigest()})
    with world.window(ctx, "the entry"):
        _load_like_transformers(copy)
    assert ctx.state["cached_code"][os.path.realpath(copy)] == str(weights / "configuration_x.py")
    elsewhere = tmp_path / "elsewhere" / "configuration_x.py"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(CODE)
    declared_files.compiled(CODE, str(elsewhere))
    assert declared_files.cache_copy(ctx, os.path.realpath(elsewhere)) is None
    with pytest.raises(CheckFailed, match="outside the project"), world.window(ctx, "the entry"):
        elsewhere.read_bytes()


def test_the_modules_cache_is_located_as_transformers_locates_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_MODULES_CACHE, else $HF_HOME/modules, else $XDG_CACHE_HOME/huggingface/modules, else
    ~/.cache/huggingface/modules (transformers/utils/hub.py, huggingface_hub/constants.py)."""
    for name in ("HF_MODULES_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(leftover, "BEFORE_APPLICATION", [None])
    assert str(tmp_path / "home" / ".cache" / "huggingface" / "modules") + os.sep in declared_files.modules_cache()
    monkeypatch.setattr(leftover, "BEFORE_APPLICATION", [None])  # as a process started with it
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert str(tmp_path / "xdg" / "huggingface" / "modules") + os.sep in declared_files.modules_cache()
    monkeypatch.setattr(leftover, "BEFORE_APPLICATION", [None])  # as a process started with it
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert declared_files.in_modules_cache(str(tmp_path / "hf" / "modules" / "x.py"))
    assert not declared_files.in_modules_cache(str(tmp_path / "xdg" / "huggingface" / "modules" / "x.py"))
    monkeypatch.setattr(leftover, "BEFORE_APPLICATION", [None])  # as a process started with it
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "mine"))
    assert declared_files.in_modules_cache(str(tmp_path / "mine" / "x.py"))
    assert not declared_files.in_modules_cache(str(tmp_path / "hf" / "modules" / "x.py"))
    assert not declared_files.in_modules_cache(str(tmp_path / "mine2" / "x.py"))  # a sibling with the same prefix


# the other sources' judgement (moved from test_verified.py: it lives here)
def test_a_file_of_a_source_folder_outside_its_fingerprint_is_undeclared(tmp_path: Path) -> None:
    """An hf source declared with ``files`` globs fingerprints only the files they match; another file of the same
    snapshot folder (a tokenizer the globs left out) is checked by nothing, so reading it is an undeclared read, while
    the fingerprinted files, the folder itself and a data source without a recorded fingerprint stay accepted."""
    from kernodeck.inenv._common import Context

    snap, other = tmp_path / "snap", tmp_path / "data"
    (snap / "sub").mkdir(parents=True)
    other.mkdir()
    ctx = Context(config={}, out=tmp_path / "out", state={
        "weights": str(snap), "weights_fingerprint": {"config.json": "a" * 64, "sub/model.bin": "b" * 64},
        "data": {"eval": other}})
    assert in_sources(ctx, str(snap / "config.json")) and in_sources(ctx, str(snap / "sub/model.bin"))
    assert in_sources(ctx, str(snap)) and in_sources(ctx, str(snap / "sub"))
    assert in_sources(ctx, str(other / "anything.csv"))  # no fingerprint known: the folder as a whole
    assert not in_sources(ctx, str(snap / "tokenizer.json"))
    assert not in_sources(ctx, str(snap / "sub" / "extra.bin"))
    # what every fingerprint leaves out is no part of the source either (seventh red-team pass: both were accepted)
    assert not in_sources(ctx, str(snap / "__pycache__" / "labels.csv"))
    assert not in_sources(ctx, str(snap / "sub" / ".gitattributes"))


def test_a_snapshots_file_is_accepted_by_the_blob_it_links_to_and_no_other_blob_is(tmp_path: Path) -> None:
    """A read is recorded by the file it opens, and an hf snapshot's files are links to blobs: a fingerprinted file's
    blob is the declared file; a blob no fingerprinted file links to (another revision's) is not."""
    from kernodeck.inenv._common import Context

    blobs, snap = tmp_path / "hub" / "blobs", tmp_path / "hub" / "snapshots" / "rev1"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (blobs / "aaa").write_text("{}")
    (blobs / "bbb").write_text("other revision")
    (snap / "config.json").symlink_to(Path("..") / ".." / "blobs" / "aaa")
    ctx = Context(config={}, out=tmp_path / "out", state={"weights": str(snap),
                                                          "weights_fingerprint": {"config.json": "a" * 64}})
    assert in_sources(ctx, os.path.realpath(snap / "config.json")) and in_sources(ctx, str(blobs / "aaa"))
    assert not in_sources(ctx, str(blobs / "bbb"))
