"""Stand-ins of the env's native readers and writers (safetensors, tokenizers, torch's C++ loaders and savers) for a
fake env, and the entry that runs one window of the application step in it: they read and write nothing the closed
world's audit hook hears, as the native ones (tests/unit/test_natives.py, tests/unit/test_redteam16.py)."""

from __future__ import annotations

from pathlib import Path

ENTRY = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import application, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
sys.path.insert(0, sys.argv[4])
import torch
for name in sys.argv[5:]:
    __import__(name)
try:
    world.forget()
    application._function(ctx, config["application"]["entry"], "entry")(None)
    world.settle()
    print(json.dumps({"status": "passed"}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""
PACKAGES = ["safetensors", "safetensors.torch", "safetensors.numpy", "tokenizers", "tokenizers.models",
            "tokenizers.implementations", "torch.jit", "torch.export", "torch.package", "torch.jit.mobile",
            "torch.export.pt2_archive", "torch.autograd.profiler", "torch.profiler"]



# the stand-ins' native I/O: bytes read and written as C++ or Rust does, with no audit event (the hook quiet meanwhile)
NATIVEIO = '''import contextlib, os, sys


@contextlib.contextmanager
def _unheard():
    mine = getattr(sys.modules.get("kernodeck_inenv.seen"), "MINE", None)
    was = getattr(mine, "quiet", False)
    if mine is not None:
        mine.quiet = True
    try:
        yield
    finally:
        if mine is not None:
            mine.quiet = was


def write(path, data=b"written natively"):
    with _unheard(), open(os.fspath(path), "wb") as f:
        f.write(data)


def mapped(path, shared):  # torch.from_file: MAP_SHARED opens the file O_RDWR | O_CREAT, else read only
    with _unheard(), open(os.fspath(path), "a+b" if shared else "rb") as f:
        f.seek(0)
        data = f.read()
        if shared:
            f.write(b"!")  # an assignment to the mapped tensor
    return data
'''
# the packages' shapes: safe_open a class, bound again by the submodules' ``from safetensors import safe_open``;
# Tokenizer.from_file a static method, the models' from_file class methods; none reads through Python. safetensors'
# serialize_file (Rust) writes under every framework's save_file and save_model, bound by ``from safetensors import``
SAFETENSORS = '''import nativeio


def serialize_file(tensor_dict, filename, metadata=None):
    nativeio.write(filename)


class safe_open:
    def __init__(self, filename, framework, device="cpu"):
        self.filename = filename

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return ["w"]
'''
SAFETENSORS_TORCH = '''from safetensors import safe_open, serialize_file


def load_file(filename, device="cpu"):
    with safe_open(filename, framework="pt", device=device) as f:
        return {k: 0 for k in f.keys()}


def save_file(tensors, filename, metadata=None):
    serialize_file(tensors, filename, metadata=metadata)


def save_model(model, filename, metadata=None, force_contiguous=True):
    save_file({}, filename, metadata)
'''
SAFETENSORS_NUMPY = '''from safetensors import serialize_file


def save_file(tensor_dict, filename, metadata=None):
    serialize_file(tensor_dict, filename, metadata)
'''
TOKENIZERS = '''
class Tokenizer:
    def __init__(self, model=None):
        self.model = model

    @staticmethod
    def from_file(path):
        return Tokenizer()
'''
# the models as Rust makes them: the constructor is ``__new__`` (given file names, it reads them in Rust; here
# nothing is read through Python), ``__init__`` is object's
TOKENIZERS_MODELS = '''
class BPE:
    def __new__(cls, vocab=None, merges=None, **kwargs):
        made = object.__new__(cls)
        made.vocab, made.merges = vocab, merges
        return made

    @classmethod
    def from_file(cls, vocab, merges, **kwargs):
        return cls()

    @staticmethod
    def read_file(vocab, merges):
        return {}, []


class WordPiece:
    def __new__(cls, vocab=None, **kwargs):
        made = object.__new__(cls)
        made.vocab = vocab
        return made


class WordLevel(WordPiece):
    pass
'''
# tokenizers.implementations: the Python tokenizers that give the user's file names to the models' constructors
TOKENIZERS_IMPLEMENTATIONS = '''from tokenizers import Tokenizer
from tokenizers.models import BPE, WordPiece


class BertWordPieceTokenizer(Tokenizer):
    def __init__(self, vocab=None, unk_token="[UNK]"):
        self.model = WordPiece(vocab, unk_token=unk_token) if vocab is not None else WordPiece()


class ByteLevelBPETokenizer(Tokenizer):
    def __init__(self, vocab=None, merges=None):
        self.model = BPE(vocab, merges) if vocab is not None and merges is not None else BPE()
'''

# torch's loaders and savers as torch 2.13 has them: given a path, C++ opens it (here: nothing read or written that the
# hook hears); given a file-like object, Python reads or writes it. torch.jit binds _serialization's load and save
# again, torch binds serialization's save; from_file is a builtin on torch, UntypedStorage's a static method of its C
# base (TypedStorage's calls it).
TORCH_NATIVES = {
    "__init__.py": "from torch.serialization import save\nfrom torch.storage import TypedStorage, UntypedStorage, "
                   "_from_file as from_file\nfrom torch.jit._script import ScriptFunction as _ScriptFunction\n"
                   "_C.ScriptFunction = _ScriptFunction  # a pybind11 class: torch.jit.script(fn) makes one\n",
    "serialization.py": '''import os, nativeio


def save(obj, f, pickle_module=None, pickle_protocol=2):
    nativeio.write(f) if isinstance(f, (str, os.PathLike)) else f.write(b"saved")  # PyTorchFileWriter(name): C++
''',
    "storage.py": '''import nativeio


def _from_file(filename, shared=None, size=0, *, dtype=None):
    return nativeio.mapped(filename, shared)


class _StorageBase:  # torch._C.StorageBase
    from_file = staticmethod(lambda filename, shared=False, nbytes=0: nativeio.mapped(filename, shared))


class UntypedStorage(_StorageBase):
    pass


class TypedStorage:
    @classmethod
    def from_file(cls, filename, shared=False, size=0):
        return UntypedStorage.from_file(filename, shared, size)
''',
    "jit/__init__.py": ("from torch.jit._serialization import load, save, jit_module_from_flatbuffer, "
                        "save_jit_module_to_flatbuffer\nfrom torch.jit._script import RecursiveScriptModule\n"),
    "jit/mobile/__init__.py": '''import os


def _load_for_lite_interpreter(f, map_location=None):  # torch._C._load_for_lite_interpreter(os.fspath(f)): C++
    return "read in C++" if isinstance(f, (str, os.PathLike)) else f.read()


def _get_model_bytecode_version(f_input):
    return 9 if isinstance(f_input, (str, os.PathLike)) else len(f_input.read())
''',
    "export/pt2_archive/__init__.py": '''import os, nativeio


class PT2ArchiveReader:  # torch._C.PyTorchFileReader(path): C++
    def __init__(self, archive_path_or_buffer):
        self.data = "read in C++" if isinstance(archive_path_or_buffer, str) else archive_path_or_buffer.read()


class PT2ArchiveWriter:  # torch._C.PyTorchFileWriter(path): C++
    def __init__(self, archive_path_or_buffer):
        nativeio.write(archive_path_or_buffer) if isinstance(archive_path_or_buffer, (str, os.PathLike)) \\
            else archive_path_or_buffer.write(b"archive")
''',
    "profiler/__init__.py": '''import nativeio


class ExecutionTraceObserver:
    def register_callback(self, output_file_path):
        nativeio.write(output_file_path)  # _add_execution_trace_observer(output_file_path): C++
        return self
''',
    "autograd/__init__.py": "",
    "autograd/profiler.py": '''import nativeio


class profile:  # torch.profiler.profile's export_chrome_trace calls this one's
    def export_chrome_trace(self, path, metadata=None, use_python_export=False):
        nativeio.write(path)  # self.kineto_results.save(path): C++
''',
    "jit/_script.py": '''import nativeio


class ScriptModule:  # a traced module's class (TracedModule) derives from it
    pass


class RecursiveScriptModule(ScriptModule):
    def save(self, f, **kwargs):
        nativeio.write(str(f))  # self._c.save(str(f)): C++

    def save_to_buffer(self, _extra_files=None):
        return b"module"

    def _save_for_lite_interpreter(self, *args, **kwargs):
        nativeio.write(args[0] if args else kwargs["f"])  # self._c._save_for_mobile: C++


class ScriptFunction:  # torch._C.ScriptFunction (torch.jit.script of a function)
    def save(self, filename, _extra_files=None):
        nativeio.write(filename)


ScriptModule._save_for_lite_interpreter = RecursiveScriptModule._save_for_lite_interpreter
ScriptModule.save = RecursiveScriptModule.save  # torch copies RecursiveScriptModule's methods onto ScriptModule
''',
    "jit/_serialization.py": '''import os, nativeio


def jit_module_from_flatbuffer(f):  # torch._C._load_jit_module_from_file(f): C++
    return "read in C++" if isinstance(f, (str, os.PathLike)) else f.read()


def save_jit_module_to_flatbuffer(m, f, _extra_files=None):  # torch._C._save_jit_module: C++
    nativeio.write(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else f.write(b"flatbuffer")


def save(m, f, _extra_files=None):
    m.save(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else f.write(m.save_to_buffer())


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    if isinstance(f, (str, os.PathLike)):
        return "read in C++"  # torch._C.import_ir_module(cu, os.fspath(f), ...)
    return f.read()
''',
    "export/__init__.py": '''import os, nativeio


def load(f, *, extra_files=None, expected_opset_version=None):
    return "read in C++" if isinstance(f, (str, os.PathLike)) else f.read()


def save(ep, f, *, extra_files=None, opset_version=None, pickle_protocol=2):
    nativeio.write(f) if isinstance(f, (str, os.PathLike)) else f.write(b"program")  # PT2ArchiveWriter: C++
''',
    "package/__init__.py": ("from .package_importer import PackageImporter\n"
                            "from .package_exporter import PackageExporter\n"),
    "package/package_exporter.py": '''import os, nativeio


class PackageExporter:
    def __init__(self, f, importer=(), debug=False):
        nativeio.write(f) if isinstance(f, (str, os.PathLike)) else f.write(b"package")  # PyTorchFileWriter(f)
''',
    "package/package_importer.py": '''import os


class PackageImporter:
    def __init__(self, file_or_buffer, module_allowed=lambda module_name: True):
        if isinstance(file_or_buffer, (str, os.PathLike)):
            self.filename = os.fspath(file_or_buffer)  # torch._C.PyTorchFileReader(self.filename): read in C++
        else:
            self.filename, self.data = "<binary>", file_or_buffer.read()
''',
}


def standins(fake: Path) -> None:
    """The stand-in packages written into the fake env (torch's ``__init__`` added to the fake torch's)."""
    for rel, text in {"nativeio.py": NATIVEIO, "safetensors/__init__.py": SAFETENSORS,
                      "safetensors/torch.py": SAFETENSORS_TORCH, "safetensors/numpy.py": SAFETENSORS_NUMPY,
                      "tokenizers/__init__.py": TOKENIZERS, "tokenizers/models.py": TOKENIZERS_MODELS,
                      "tokenizers/implementations.py": TOKENIZERS_IMPLEMENTATIONS,
                      **{f"torch/{rel}": text for rel, text in TORCH_NATIVES.items()}}.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        before = (fake / rel).read_text(encoding="utf-8") if rel == "torch/__init__.py" else ""
        (fake / rel).write_text(before + text, encoding="utf-8")
