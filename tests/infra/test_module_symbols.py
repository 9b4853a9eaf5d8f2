"""The compiled core exports no part of a C++ runtime. A toolchain that links libstdc++ statically into the
module (the GPU machine's did) left its symbols exported: the process's libstdc++.so, loaded first by torch,
then took some of the calls and the copy the rest, their locale state disagreed, and the first number
formatted through a stream crashed (OpInfo::describe, in Work.info and on a receive's progress thread).
CMakeLists.txt keeps such a copy private. Marked gpu so that scripts/gpu_check.sh runs it on that machine's
build too; it needs no GPU."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pycomm._build import core

# Mangled prefixes of what only libstdc++'s / libsupc++'s own objects define (iostreams, locales, threads,
# the exception runtime); a module built against the shared library leaves them undefined.
RUNTIME_PREFIXES = (
    "_ZNSt6locale",
    "_ZNKSt6locale",
    "_ZNSo",
    "_ZNSi",
    "_ZNSt8ios_base",
    "_ZNKSt7codecvt",
    "_ZNKSt7num_put",
    "_ZSt4cout",
    "_ZNSt6thread15_M_start_thread",
    "__cxa_throw",
    "__gxx_personality_v0",
)

SHT_DYNSYM, SHN_UNDEF, STB_GLOBAL, STB_WEAK = 11, 0, 1, 2


def exported_symbols(path: Path) -> list[str]:
    """The names an ELF64 little-endian shared object defines and exports (its .dynsym, global or weak)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        pytest.skip(f"{path.name} is not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != SHT_DYNSYM:
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name, info, _, shndx = struct.unpack_from("<IBBH", data, at)  # Elf64_Sym's first fields
            if shndx != SHN_UNDEF and info >> 4 in (STB_GLOBAL, STB_WEAK):
                start = strings + name
                names.append(data[start : data.index(b"\0", start)].decode())
    return names


@pytest.mark.gpu
def test_the_core_exports_no_cxx_runtime() -> None:
    path = Path(core().__file__)
    names = exported_symbols(path)
    assert "PyInit__C" in names, f"the reader found no module entry point in {path}: {names[:20]}"
    leaked = sorted(n for n in names if n.startswith(RUNTIME_PREFIXES))
    assert not leaked, (
        f"{path.name} exports {len(leaked)} symbols of a C++ runtime linked into it, e.g. "
        f"{leaked[:8]}; link with -Wl,--exclude-libs for that archive (CMakeLists.txt)"
    )
