"""Compiled extensions, found from OUTSIDE the env before it runs: every shared object linking libtorch or libc10.

Each distribution's ``RECORD`` names its files; every ELF shared object among them (other than torch's own) whose
``DT_NEEDED`` entries name ``libtorch*``/``libc10*`` is an extension built against one torch. Per distribution:
its objects, the module each one is (an object exporting ``PyInit_<name>``), what it says it was built for where that
is recorded (a local version label such as ``+pt25cu124``, a ``Requires-Dist: torch`` pin, a ``libcudart.so.12``
it needs, the compiler in its ``.comment``) and, where ``cuobjdump`` is on PATH, the CUDA architectures its kernels
carry. The in-env ``extensions`` step (kernodeck/inenv/extensions.py) imports each module and judges them.

Mach-O (macOS) and PE (Windows) objects are not read: they are named under ``not_read`` (docs/extensions.md).
"""

from __future__ import annotations

import csv
import hashlib
import io
import mmap
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from kernodeck._proc import log, show
from kernodeck.env.elfneeded import needed_from_headers
from kernodeck.env.records import site_dirs

if TYPE_CHECKING:  # pyelftools is imported only to read an object that links torch (most envs have none)
    from elftools.elf.elffile import ELFFile
    from packaging.pylock import Pylock

TORCH_LIB = re.compile(r"^lib(torch|c10)[A-Za-z0-9_]*\.(so|dylib)")
# the distributions whose libraries ARE torch (its own libtorch/libc10 link each other)
TORCH_OWN = frozenset({"torch"})
_LABEL_TORCH = re.compile(r"(?:^|[.+_-])(?:pt|torch)(\d)\.?(\d{1,2})(?=$|[.+_a-z-])")
_LABEL_CUDA = re.compile(r"(?:^|[.+_-]|\d)cu(\d{2,3})(?=$|[.+_a-z-])")
_LABEL_ROCM = re.compile(r"rocm(\d+(?:\.\d+)*)")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)")
_ARCH = re.compile(r"\.(sm_\d+a?)\.")
_PTX = re.compile(r"\.(compute_\d+a?)\.")
_ELF_MAGIC = b"\x7fELF"
_MACHO_MAGIC = (b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


@dataclass(frozen=True)
class SharedObject:
    """One shared object of an extension's distribution that links torch."""

    path: str  # as its RECORD names it, relative to site-packages
    module: str | None  # the Python module it is (it exports PyInit_<name>); None: a library another object loads
    links: tuple[str, ...]  # its DT_NEEDED entries that are torch's (libtorch*, libc10*)
    needed: tuple[str, ...]  # every DT_NEEDED entry
    compiler: str  # from its .comment section ("" when none)
    cuda_arches: tuple[str, ...] | None  # sm_XY of the kernels it carries (None: not read, no cuobjdump)
    ptx: tuple[str, ...] = ()  # compute_XY of the PTX it carries (JIT-compiled for a newer device)


@dataclass(frozen=True)
class Extension:
    """A distribution holding compiled code built against torch."""

    distribution: str
    version: str
    objects: tuple[SharedObject, ...]
    built_for: dict[str, str] = field(default_factory=dict)  # torch / cuda / rocm / compiler -> value, and "from"


@dataclass(frozen=True)
class BuiltHere:
    """A lock pin installed from its sdist, built at install (none of the lock's wheels carries its tags)."""

    name: str
    version: str
    tags: tuple[str, ...]  # the installed WHEEL's tags (a wheel built here: e.g. cp311-cp311-linux_x86_64)
    generator: str  # the WHEEL's Generator: the build backend that made it, e.g. "setuptools (80.9.0)"
    sdist: str  # the lock's sdist it was built from
    sdist_sha256: str
    record_sha256: str  # sha256 of its installed RECORD, which holds the sha256 of every file the built wheel held


@dataclass(frozen=True)
class Discovery:
    """What the env's RECORDs hold: the extensions, and the objects that could not be read (Mach-O, damaged)."""

    extensions: tuple[Extension, ...]
    not_read: tuple[str, ...] = ()
    cuobjdump: str = ""  # its path, when the CUDA architectures were read
    built_here: tuple[BuiltHere, ...] = ()

    def as_config(self) -> dict[str, Any]:
        """As the in-env step reads it from run-config.json."""
        return {
            "discovered": [asdict(e) for e in self.extensions],
            "not_read": list(self.not_read),
            "cuobjdump": self.cuobjdump or None,
            "built_here": [asdict(b) for b in self.built_here],
        }


def built_for(version: str, requires: list[str], objects: list[SharedObject]) -> dict[str, str]:
    """What an extension says it was built for: its local version label first, then its torch pin, then its
    objects (the CUDA runtime they need, the compiler that made them)."""
    found: dict[str, str] = {}
    sources: list[str] = []
    label = version.partition("+")[2].lower()
    if label:
        if m := _LABEL_TORCH.search(label):
            found["torch"] = f"{m.group(1)}.{int(m.group(2))}"
        if m := _LABEL_CUDA.search(label):
            digits = m.group(1)
            found["cuda"] = f"{digits[:-1]}.{digits[-1]}"
        if m := _LABEL_ROCM.search(label):
            found["rocm"] = m.group(1)
        if found:
            sources.append(f"version label +{label}")
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "torch" and str(req.specifier) and "torch" not in found:
            found["torch"] = str(req.specifier)
            sources.append("Requires-Dist: torch")
    cudart = sorted({m.group(1) for o in objects for n in o.needed if (m := _CUDART.match(n))})
    if cudart and "cuda" not in found:
        found["cuda"] = cudart[0]
        sources.append(f"needs libcudart.so.{cudart[0]}")
    compilers = sorted({o.compiler for o in objects if o.compiler})
    if compilers:
        found["compiler"] = "; ".join(compilers)
    if sources:
        found["from"] = ", ".join(sources)
    return found


def _needed(elf: ELFFile) -> list[str]:
    """Its DT_NEEDED entries, as pyelftools reads them."""
    from elftools.elf.dynamic import DynamicSegment

    # the PT_DYNAMIC segment: a few program headers to read, where finding the section parses every section header
    for segment in elf.iter_segments("PT_DYNAMIC"):
        if isinstance(segment, DynamicSegment):
            return [str(getattr(t, "needed", "")) for t in segment.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    return []


def _names_torch(handle: BinaryIO) -> bool:
    """Whether the file holds the name of a torch library anywhere: a DT_NEEDED entry is a string of its dynamic
    string table, so an object without one links no torch. Read where its headers say the DT_NEEDED names are (a few
    kilobytes, :mod:`kernodeck.env.elfneeded`); an object whose headers cannot be followed that way is searched byte
    by byte."""
    needed = needed_from_headers(handle)
    if needed is not None:
        return any(TORCH_LIB.match(name) for name in needed)
    with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return data.find(b"libc10") >= 0 or data.find(b"libtorch") >= 0


def _exports(elf: ELFFile, name: str) -> bool:
    """Whether its dynamic symbol table defines ``name``."""
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is None:
        return False
    found = dynsym.get_symbol_by_name(name)  # type: ignore[attr-defined]
    return any(sym["st_shndx"] != "SHN_UNDEF" for sym in found or [])


def _comment(elf: ELFFile) -> str:
    section = elf.get_section_by_name(".comment")
    if section is None:
        return ""
    parts = [p.decode("utf-8", "replace").strip() for p in section.data().split(b"\0")]
    return "; ".join(sorted({p for p in parts if p}))


def cuda_arches(path: Path, cuobjdump: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(sm_XY cubins, compute_XY PTX) the object carries, as ``cuobjdump --list-elf`` / ``--list-ptx`` list them."""
    found: list[tuple[str, ...]] = []
    for flag, pattern in (("--list-elf", _ARCH), ("--list-ptx", _PTX)):
        argv = [cuobjdump, flag, str(path)]
        log(f"$ {show(argv)}")
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        found.append(tuple(sorted({m.group(1) for m in pattern.finditer(out)})))
    return found[0], found[1]


def find_cuobjdump(environ: Mapping[str, str]) -> str:
    """``cuobjdump`` on PATH, else in the CUDA toolkit ``CUDA_HOME``/``CUDA_PATH`` names ("" when none)."""
    found = shutil.which("cuobjdump", path=environ.get("PATH"))
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        candidate = Path(environ.get(var) or "/nonexistent") / "bin" / "cuobjdump"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return ""


def _linking(handle: BinaryIO, stem: str) -> tuple[list[str], tuple[str, ...], bool, str] | None | str:
    """An object that names a torch library, parsed by pyelftools: (its DT_NEEDED, those of torch's, whether it
    exports ``PyInit_<stem>``, its compiler); None when no DT_NEEDED entry is torch's; why it could not be read."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        handle.seek(0)
        elf = ELFFile(handle)
        needed = _needed(elf)
        links = tuple(n for n in needed if TORCH_LIB.match(n))
        if not links:
            return None
        return needed, links, _exports(elf, f"PyInit_{stem}"), _comment(elf)
    except (OSError, ELFError) as exc:
        return str(exc)


def read_object(site: Path, rel: str, cuobjdump: str) -> SharedObject | None | str:
    """The object at ``site/rel`` if it links torch; None if it does not; a string saying why it was not read."""
    path = site / rel
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
            if magic in _MACHO_MAGIC:
                return f"{rel}: Mach-O (load commands are not read)"
            if magic != _ELF_MAGIC or not _names_torch(handle):
                return None
            parsed = _linking(handle, Path(rel).name.split(".", 1)[0])
    except OSError as exc:
        return f"{rel}: {exc}"
    if parsed is None or isinstance(parsed, str):
        return parsed if parsed is None else f"{rel}: {parsed}"
    needed, links, exports, compiler = parsed
    stem = Path(rel).name.split(".", 1)[0]
    module = ".".join([*Path(rel).parent.parts, stem]).lstrip(".") if exports else None
    arches: tuple[str, ...] | None = None
    ptx: tuple[str, ...] = ()
    if cuobjdump:
        arches, ptx = cuda_arches(path, cuobjdump)
    return SharedObject(rel, module, links, tuple(needed), compiler, arches, ptx)


def _record_paths(info: Path) -> list[str]:
    try:
        text = (info / "RECORD").read_text(encoding="utf-8")
    except OSError:
        return []
    return [row[0] for row in csv.reader(io.StringIO(text, newline="")) if row]


def _is_shared(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name.endswith((".so", ".dylib")) or ".so." in name


def _metadata(info: Path) -> tuple[str, str, list[str]]:
    try:
        text = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
        # its headers end at the first empty line; the description after it (tens of KB) is not parsed
        meta = HeaderParser().parsestr(text.partition("\n\n")[0] + "\n")
    except OSError:
        stem = info.name.removesuffix(".dist-info")
        name, _, version = stem.partition("-")
        return name, version, []
    return str(meta.get("Name", "")), str(meta.get("Version", "")), list(meta.get_all("Requires-Dist") or [])


def _wheel_file(info: Path) -> tuple[tuple[str, ...], str]:
    """(tags, generator) of an installed distribution's WHEEL file."""
    try:
        meta = HeaderParser().parsestr((info / "WHEEL").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return (), ""
    return tuple(str(t) for t in meta.get_all("Tag") or []), str(meta.get("Generator", ""))


def built_here(info: Path, name: str, version: str, twin: Pylock | None) -> BuiltHere | None:
    """The distribution at ``info`` if the lock's twin shows it was built from its sdist: it has an sdist and none of
    its wheels carries the installed tags (PyPI takes no ``linux_x86_64`` wheel: one built here has that tag)."""
    if twin is None:
        return None
    pin = next((p for p in twin.packages if canonicalize_name(p.name) == canonicalize_name(name)
                and (p.version is None or str(p.version) == version)), None)
    if pin is None or pin.sdist is None:
        return None
    tags, generator = _wheel_file(info)
    locked: set[str] = set()
    for wheel in pin.wheels or ():
        if wheel.name:
            try:
                locked |= {str(t) for t in parse_wheel_filename(wheel.name)[3]}
            except InvalidWheelFilename:
                continue
    if tags and set(tags) & locked:
        return None
    try:
        record = hashlib.sha256((info / "RECORD").read_bytes()).hexdigest()
    except OSError:
        record = ""
    return BuiltHere(name, version, tags, generator, pin.sdist.name or "", str(pin.sdist.hashes.get("sha256", "")),
                     record)


def dist_infos(env: Path) -> Iterator[tuple[Path, str, str, list[str]]]:
    """Each installed distribution of the env at ``env``: its ``.dist-info`` folder, name, version, requirements."""
    for site_rel in site_dirs(env):
        for info in sorted((env / site_rel).glob("*.dist-info")):
            yield info, *_metadata(info)


def discover(env: Path, cuobjdump: str | None = None, twin: Pylock | None = None) -> Discovery:
    """Every distribution of the env at ``env`` holding shared objects that link torch (torch's own excepted), and
    the lock's pins (``twin``: its PEP 751 twin) that were built here from their sdist."""
    tool = find_cuobjdump(os.environ) if cuobjdump is None else cuobjdump
    found: list[Extension] = []
    not_read: list[str] = []
    built: list[BuiltHere] = []
    for info, name, version, requires in dist_infos(env):
        site = info.parent
        if (made := built_here(info, name, version, twin)) is not None:
            built.append(made)
        if canonicalize_name(name) in TORCH_OWN:
            continue
        objects: list[SharedObject] = []
        for rel in _record_paths(info):
            if not _is_shared(rel) or rel.startswith(".."):
                continue
            got = read_object(site, rel, tool or "")
            if isinstance(got, str):
                not_read.append(f"{name}: {got}")
            elif got is not None:
                objects.append(got)
        if objects:
            found.append(Extension(name, version, tuple(objects), built_for(version, requires, objects)))
    return Discovery(tuple(found), tuple(not_read), tool or "", tuple(built))
