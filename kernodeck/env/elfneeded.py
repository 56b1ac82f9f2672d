"""The DT_NEEDED entries of an ELF shared object, read where its headers point (kernodeck/env/extension_scan.py).

Its program headers, its dynamic segment and the string table that segment points to: a few kilobytes of an object
that is often megabytes, where pyelftools (which the scan uses for an object that does name a torch library) or a
search through every byte read far more. Standard library only.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

_ELF_CLASS = {1: ("I", 52, 32, 8), 2: ("Q", 64, 56, 16)}  # ELF32, ELF64: word, header, phdr and dyn entry sizes
_PT_LOAD, _PT_DYNAMIC, _DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ = 1, 2, 0, 1, 5, 10


def needed_from_headers(handle: BinaryIO) -> list[str] | None:
    """The DT_NEEDED entries of the ELF object open as ``handle``, read from its program headers, its dynamic
    segment and the string table it points to (what pyelftools reads, without reading the rest of a file that is
    often megabytes); None when the headers are not what an ELF shared object has (the caller searches instead)."""
    try:
        handle.seek(0)
        ident = handle.read(16)
        layout = _ELF_CLASS.get(ident[4]) if len(ident) == 16 else None
        if layout is None or ident[5] not in (1, 2):
            return None
        word, header_size, phdr_size, dyn_size = layout
        end = "<" if ident[5] == 1 else ">"
        header = ident + handle.read(header_size - 16)
        if len(header) < header_size:
            return None
        if word == "Q":
            phoff, = struct.unpack_from(end + "Q", header, 32)
            phentsize, phnum = struct.unpack_from(end + "HH", header, 54)
        else:
            phoff, = struct.unpack_from(end + "I", header, 28)
            phentsize, phnum = struct.unpack_from(end + "HH", header, 42)
        if phentsize < phdr_size or not 0 < phnum < 0xFFFF:
            return None
        handle.seek(phoff)
        table = handle.read(phentsize * phnum)
        if len(table) < phentsize * phnum:
            return None
        loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
        dynamic: tuple[int, int] | None = None  # (offset, filesz)
        for index in range(phnum):
            at = index * phentsize
            if word == "Q":
                kind, _, offset, vaddr, _, filesz = struct.unpack_from(end + "IIQQQQ", table, at)
            else:
                kind, offset, vaddr, _, filesz = struct.unpack_from(end + "IIIII", table, at)
            if kind == _PT_LOAD:
                loads.append((vaddr, offset, filesz))
            elif kind == _PT_DYNAMIC:
                dynamic = (offset, filesz)
        if dynamic is None:
            return []  # no dynamic segment: it needs nothing
        handle.seek(dynamic[0])
        raw = handle.read(dynamic[1])
        names: list[int] = []
        strtab = strsz = None
        for at in range(0, len(raw) - dyn_size + 1, dyn_size):
            tag, value = struct.unpack_from(end + word * 2, raw, at)
            if tag == _DT_NULL:
                break
            if tag == _DT_NEEDED:
                names.append(value)
            elif tag == _DT_STRTAB:
                strtab = value
            elif tag == _DT_STRSZ:
                strsz = value
        if not names:
            return []
        if strtab is None or strsz is None:
            return None
        start = next((offset + strtab - vaddr for vaddr, offset, filesz in loads
                      if vaddr <= strtab and strtab + strsz <= vaddr + filesz), None)
        if start is None:
            return None
        handle.seek(start)
        strings = handle.read(strsz)
        if len(strings) < strsz or any(n >= strsz for n in names):
            return None
        return [strings[n:strings.index(b"\0", n)].decode("utf-8", "replace") for n in names]
    except (OSError, struct.error, ValueError):
        return None
