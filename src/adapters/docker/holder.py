"""The port holder's image: one tiny static program that waits for ever, made on the
server through Docker's image import (no registry, no build, no base image).

A port app's holder (``berth.core.use_cases.holders``) is a long-lived container that
owns the app's network namespace and publishes its host port; the app's containers
join it. Its program does nothing but wait: as PID 1 it ignores SIGTERM (the holder is
stopped with SIGKILL) and needs no libc, so it is written here, byte by byte, as an
ELF64 executable of one loadable segment for the server's architecture:

* x86_64: ``mov eax, 34 (pause); syscall; jmp back``;
* aarch64: ``ppoll(NULL, 0, NULL, NULL)`` (syscall 73, waits for ever), ``svc #0``,
  ``b back`` -- aarch64 has no ``pause``.

The image holds that one file (``/holder``) and is tagged ``HOLDER_IMAGE``; the version
in the tag changes when the program does.
"""

from __future__ import annotations

import io
import struct
import tarfile

from berth.core.errors import RuntimeFailure

__all__ = [
    "HOLDER_IMAGE",
    "HOLDER_IMAGE_LABEL",
    "HOLDER_PATH",
    "LOAD_ADDRESS",
    "holder_elf",
    "holder_tar",
    "machine_of",
]

#: The holder image's repository and tag on every server.
HOLDER_REPOSITORY = "berth-port-holder"
HOLDER_VERSION = "1"
HOLDER_IMAGE = f"{HOLDER_REPOSITORY}:{HOLDER_VERSION}"
#: The label the image carries (what disk usage leaves out: it is berth's, not the user's).
HOLDER_IMAGE_LABEL = "berth.holder-image"
#: Where the program is in the image.
HOLDER_PATH = "/holder"

#: Where the program is loaded: the usual base of a static executable, page-aligned.
LOAD_ADDRESS = 0x400000
_EHDR_SIZE = 64  # ELF64 file header
_PHDR_SIZE = 56  # ELF64 program header
_CODE_OFFSET = _EHDR_SIZE + _PHDR_SIZE  # the code follows the one program header

#: ``e_machine`` of each architecture.
EM_X86_64 = 62
EM_AARCH64 = 183


def _aarch64(*words: int) -> bytes:
    """aarch64 instructions: 32-bit words, little-endian."""
    return b"".join(struct.pack("<I", word) for word in words)


#: The program of each architecture: a loop around one blocking system call.
_CODE: dict[int, bytes] = {
    EM_X86_64: b"".join(
        [
            b"\xb8\x22\x00\x00\x00",  # mov eax, 34  (pause: sleeps until a signal)
            b"\x0f\x05",  # syscall
            b"\xeb\xf7",  # jmp -9       (back to the mov: 5 + 2 + 2 bytes)
        ]
    ),
    EM_AARCH64: _aarch64(
        0xD2800000,  # mov x0, #0   fds = NULL
        0xD2800001,  # mov x1, #0   nfds = 0
        0xD2800002,  # mov x2, #0   timeout = NULL: for ever
        0xD2800003,  # mov x3, #0   sigmask = NULL
        0xD2800928,  # mov x8, #73  ppoll (movz: 0xD2800000 | 73 << 5 | 8)
        0xD4000001,  # svc #0
        0x17FFFFFA,  # b -6 instructions (back to the first mov: imm26 = -6)
    ),
}

#: Docker's ``/info`` ``Architecture`` (``uname -m`` of the server) -> ``e_machine``.
_MACHINES = {"x86_64": EM_X86_64, "amd64": EM_X86_64, "aarch64": EM_AARCH64, "arm64": EM_AARCH64}


def machine_of(architecture: str | None) -> int:
    """The ELF machine for Docker's ``Architecture``; ``RuntimeFailure`` (kind
    ``holder-unsupported``) for one berth has no holder program for."""
    machine = _MACHINES.get((architecture or "").lower())
    if machine is None:
        raise RuntimeFailure(
            f"berth has no port holder for the server's architecture ({architecture}).",
            kind="holder-unsupported",
        )
    return machine


def holder_elf(machine: int) -> bytes:
    """The holder program for ``machine`` (``EM_X86_64`` | ``EM_AARCH64``): an ELF64
    little-endian executable with one ``PT_LOAD`` segment (read + execute) mapping the
    whole file at ``LOAD_ADDRESS``; it starts at the code right after the headers."""
    code = _CODE[machine]
    size = _CODE_OFFSET + len(code)
    entry = LOAD_ADDRESS + _CODE_OFFSET
    ident = b"\x7fELF" + bytes(
        [
            2,  # EI_CLASS: ELFCLASS64
            1,  # EI_DATA: little-endian
            1,  # EI_VERSION: current
            0,  # EI_OSABI: System V
        ]
    )
    header = ident.ljust(16, b"\0") + struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # e_type: ET_EXEC
        machine,  # e_machine
        1,  # e_version
        entry,  # e_entry
        _EHDR_SIZE,  # e_phoff: the program header follows the file header
        0,  # e_shoff: no section headers
        0,  # e_flags
        _EHDR_SIZE,  # e_ehsize
        _PHDR_SIZE,  # e_phentsize
        1,  # e_phnum
        0,  # e_shentsize
        0,  # e_shnum
        0,  # e_shstrndx
    )
    segment = struct.pack(
        "<IIQQQQQQ",
        1,  # p_type: PT_LOAD
        5,  # p_flags: PF_R | PF_X
        0,  # p_offset: from the file's first byte (headers included)
        LOAD_ADDRESS,  # p_vaddr
        LOAD_ADDRESS,  # p_paddr
        size,  # p_filesz
        size,  # p_memsz
        0x1000,  # p_align: a page
    )
    return header + segment + code


def holder_tar(machine: int) -> bytes:
    """The image's one layer: a tar holding the program at ``HOLDER_PATH`` (mode 0755,
    owned by root)."""
    program = holder_elf(machine)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        entry = tarfile.TarInfo(HOLDER_PATH.lstrip("/"))
        entry.size = len(program)
        entry.mode = 0o755
        tar.addfile(entry, io.BytesIO(program))
    return buffer.getvalue()
