"""Loading a cached kernel's machine code without parsing the LLVM bitcode kept beside it.

numba caches a compiled kernel as its object code plus its whole LLVM module as bitcode, which
another kernel needs only to link it in (inlining it). On loading, numba parses that bitcode
anyway, to learn which symbols the library defines: 0.1-0.17 s for the float64 passes' entry
kernel (1.7 MB), the largest part of a first call once numba is imported. Here the defined
symbols come from the object code's ELF symbol table, which holds the same global names (checked
on every shipped kernel by tests/test_precompiled.py), and the bitcode is parsed only if some
other library asks to link this one. Object code that is not ELF-64 (another OS's cache) goes
through numba's own loader.
"""

from __future__ import annotations

import struct
from typing import Any

from llvmlite import binding as ll
from numba.core import codegen as numba_codegen
from numba.core import compiler

_SYMTAB = 2  # ELF section type of the symbol table
_GLOBAL, _WEAK = 1, 2  # ELF symbol bindings that other modules can refer to
_UNDEFINED = 0  # the section index of a symbol the object only refers to


def elf_defined_symbols(obj: bytes) -> set[str] | None:
    """The global and weak symbols an ELF-64 little-endian object defines, or None for another
    format."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return None
    (section_headers,) = struct.unpack_from("<Q", obj, 0x28)
    header_size, count = struct.unpack_from("<HH", obj, 0x3A)
    # (name, type, flags, address, offset, size, link, info, alignment, entry size)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, section_headers + i * header_size) for i in range(count)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entry_size in sections:
        if kind != _SYMTAB:
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entry_size):
            name, info, _, section, _, _ = struct.unpack_from("<IBBHQQ", obj, at)
            if info >> 4 in (_GLOBAL, _WEAK) and section != _UNDEFINED:
                names.add(obj[strings + name : obj.index(b"\0", strings + name)].decode())
    return names


class _LazilyLinkableLibrary(numba_codegen.JITCodeLibrary):
    """numba's JIT library whose module for linking is parsed from its bitcode on first use."""

    @property
    def _shared_module(self) -> Any:
        module = self.__dict__.get("_parsed_shared_module")
        if module is None and self.__dict__.get("_shared_bitcode") is not None:
            module = self.__dict__["_parsed_shared_module"] = ll.parse_bitcode(self.__dict__["_shared_bitcode"])
        return module

    @_shared_module.setter
    def _shared_module(self, module: Any) -> None:
        self.__dict__["_parsed_shared_module"] = module


def _unserialize(codegen: Any, libdata: tuple) -> Any:
    """numba's JITCodeLibrary._unserialize for object code, taking the defined symbols from it."""
    name, kind, data = libdata
    symbols = (
        elf_defined_symbols(data[0]) if kind == "object" and type(codegen) is numba_codegen.JITCPUCodegen else None
    )
    if symbols is None:
        return codegen.unserialize_library(libdata)
    object_code, shared_bitcode = data
    library = _LazilyLinkableLibrary(codegen, name)
    library.__dict__["_shared_bitcode"] = shared_bitcode
    library.enable_object_caching()
    library._set_compiled_object(object_code)
    library._finalize_final_module()
    codegen._engine._defined_symbols |= symbols
    return library


def rebuild(
    target_context: Any,
    libdata: tuple,
    fndesc: Any,
    env: Any,
    signature: Any,
    objectmode: bool,
    lifted: tuple,
    typeann: str,
    reload_init: list,
    referenced_envs: tuple,
) -> Any:
    """numba's CompileResult._rebuild (the arguments of a cache entry), loading by :func:`_unserialize`."""
    for init in reload_init or ():
        init()
    library = _unserialize(target_context.codegen(), libdata)
    entry_point = target_context.get_executable(library, fndesc, env)
    result = compiler.CompileResult(
        target_context=target_context,
        typing_context=target_context.typing_context,
        library=library,
        environment=env,
        entry_point=entry_point,
        fndesc=fndesc,
        type_annotation=typeann,
        signature=signature,
        objectmode=objectmode,
        lifted=lifted,
        typing_error=None,
        call_helper=None,
        metadata=None,
        reload_init=reload_init,
        referenced_envs=referenced_envs,
    )
    for environment in referenced_envs:
        library.codegen.set_env(environment.env_name, environment)
    return result
