"""Whether a checkpoint file is whole, from its size and a few of its bytes (pure).

The scan in :mod:`elastic.run.watches.checkpoint_scan` reads a file's first and last bytes
(:class:`FileFacts`); the functions here decide, without I/O:

- zip archives (``torch.save`` since torch 1.6, Lightning ``.ckpt``, NumPy
  ``.npz``): the end-of-central-directory record must end the file, and the
  central directory it points to must lie inside it. A file cut off mid-write
  has no such record at its end.
- safetensors: an 8-byte little-endian header length, a JSON header, then the
  data; the header must fit in the file and its last data offset must end
  exactly where the file does.
- pickles (protocol 2+, ``.pkl``): the stream ends with the STOP opcode ``.``.
- NumPy ``.npy``: the size the header announces (shape times item size).
- HDF5 (``.h5``, Keras): the end-of-file address in the superblock must lie
  inside the file (the HDF5 library itself calls a file shorter than that
  truncated).

Files in any other format (legacy torch pickles, msgpack, gzip) are
accepted on their name and extension; an empty file never is.
"""

from __future__ import annotations

import ast
import io
import json
import math
import pickletools
import re
import struct
from dataclasses import dataclass

__all__ = [
    "HEAD_BYTES",
    "MAX_HEAD_BYTES",
    "TAIL_BYTES",
    "FileFacts",
    "head_bytes_needed",
    "lightning_global_step",
    "pickled_int",
    "structure_problem",
]

# Bytes read from each end of a file: the zip end record (22 bytes plus a
# comment of at most 65535) fits in the tail; a safetensors header of a few
# hundred tensors, and the start of a Lightning checkpoint's pickle, in the head.
TAIL_BYTES = 22 + 0xFFFF
HEAD_BYTES = 64 * 1024
# A safetensors header larger than the head is read whole up to this much.
MAX_HEAD_BYTES = 16 * 1024 * 1024
# DeepSpeed's model states keep dp_world_size after the module's state dict
# (names and tensor references, the tensors themselves come after the pickle).
DEEPSPEED_HEAD_BYTES = 4 * 1024 * 1024
_DEEPSPEED_MODEL_STATES = "model_states.pt"

_ZIP_LOCAL = b"PK\x03\x04"
_ZIP_CENTRAL = b"PK\x01\x02"
_ZIP_END = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_END = b"PK\x06\x06"
_NPY_MAGIC = b"\x93NUMPY"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_SAFETENSORS_EXTENSION = ".safetensors"
_MEMO_OPCODES = frozenset({"BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"})
_INT_OPCODES = frozenset({"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4"})
_STRING_OPCODES = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8", "SHORT_BINSTRING",
                             "BINSTRING", "STRING"})


@dataclass(frozen=True)
class FileFacts:
    """What the scan read of one file: its size, its first bytes and its last bytes.

    ``unreadable`` says why the file could not be read (its bytes are then empty).
    """

    name: str
    size: int
    head: bytes = b""
    tail: bytes = b""
    unreadable: str | None = None


def head_bytes_needed(name: str, first: bytes) -> int:
    """How many leading bytes the checks need, given the file's first 8."""
    if name.endswith(_DEEPSPEED_MODEL_STATES):
        return DEEPSPEED_HEAD_BYTES
    if name.lower().endswith(_SAFETENSORS_EXTENSION) and len(first) >= 8:
        header: int = struct.unpack("<Q", first[:8])[0]
        return max(HEAD_BYTES, min(8 + header, MAX_HEAD_BYTES))
    return HEAD_BYTES


def structure_problem(facts: FileFacts) -> str | None:
    """Why ``facts`` is not a whole checkpoint file, or ``None`` if it is (or cannot be told)."""
    if facts.unreadable is not None:
        return f"cannot be read: {facts.unreadable}"
    if facts.size == 0:
        return "empty file"
    if facts.name.lower().endswith(_SAFETENSORS_EXTENSION):
        return _safetensors_problem(facts)
    if facts.head.startswith(_ZIP_LOCAL):
        return _zip_problem(facts)
    if len(facts.head) < len(_ZIP_LOCAL) and _ZIP_LOCAL.startswith(facts.head):
        return "torn: cut off inside the zip header"
    if facts.head.startswith(_NPY_MAGIC):
        return _npy_problem(facts)
    if facts.head.startswith(_HDF5_MAGIC):
        return _hdf5_problem(facts)
    if len(facts.head) >= 2 and facts.head[0] == 0x80 and 2 <= facts.head[1] <= 5 and _is_plain_pickle(facts.name):
        return None if facts.tail.endswith(b".") else "torn: the pickle does not end with its STOP opcode"
    return None


def _is_plain_pickle(name: str) -> bool:
    # Legacy torch.save files also start as a pickle, but raw tensor bytes follow it.
    return name.lower().endswith((".pkl", ".pickle"))


def _zip_problem(facts: FileFacts) -> str | None:
    tail, size = facts.tail, facts.size
    start = size - len(tail)  # file offset of tail[0]
    position = tail.rfind(_ZIP_END)
    while position >= 0:
        if position + 22 <= len(tail):
            comment = struct.unpack("<H", tail[position + 20 : position + 22])[0]
            if position + 22 + comment == len(tail):
                break
        position = tail.rfind(_ZIP_END, 0, position)
    if position < 0:
        return "torn: no zip end-of-central-directory record at the end (cut off mid-write?)"
    end_at = start + position
    cd_size, cd_offset = struct.unpack("<II", tail[position + 12 : position + 20])
    if 0xFFFFFFFF in (cd_size, cd_offset):  # zip64: the locator sits just before the end record
        locator = position - 20
        if locator < 0 or tail[locator : locator + 4] != _ZIP64_LOCATOR:
            return "torn: zip64 end record without its locator"
        end64_at = struct.unpack("<Q", tail[locator + 8 : locator + 16])[0]
        if end64_at + 56 > start + locator:
            return "torn: the zip64 end record lies outside the file"
        end64 = end64_at - start
        if end64 >= 0:
            if tail[end64 : end64 + 4] != _ZIP64_END:
                return "torn: no zip64 end record where the locator points"
            cd_size, cd_offset = struct.unpack("<QQ", tail[end64 + 40 : end64 + 56])
        end_at = end64_at
    if cd_offset + cd_size > end_at:
        return "torn: the zip central directory lies outside the file"
    central = cd_offset - start
    if cd_size and 0 <= central and tail[central : central + 4] not in (_ZIP_CENTRAL, b""):
        return "torn: no zip central directory where the end record points"
    return None


def _safetensors_problem(facts: FileFacts) -> str | None:
    if facts.size < 8 or len(facts.head) < 8:
        return "torn: shorter than the safetensors header length"
    length = struct.unpack("<Q", facts.head[:8])[0]
    if 8 + length > facts.size:
        return f"torn: the safetensors header needs {8 + length} bytes, the file holds {facts.size}"
    if 8 + length > len(facts.head):
        return None  # a header larger than we read: its length fits, which is all we can tell
    try:
        header = json.loads(facts.head[8 : 8 + length])
        ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return "torn: the safetensors header is not valid JSON"
    expected = 8 + length + max(ends, default=0)
    if expected != facts.size:
        return f"torn: the safetensors header describes {expected} bytes, the file holds {facts.size}"
    return None


_NPY_ITEM = re.compile(r"[<>|=]?[a-zA-Z](?P<size>[0-9]+)")


def _npy_problem(facts: FileFacts) -> str | None:
    head = facts.head
    if len(head) < 10:
        return "torn: shorter than the .npy header"
    if head[6] == 1:
        length, start = struct.unpack("<H", head[8:10])[0], 10
    else:
        length, start = (struct.unpack("<I", head[8:12])[0], 12) if len(head) >= 12 else (0, 12)
    if start + length > len(head):
        return None if start + length <= facts.size else "torn: shorter than the .npy header"
    try:
        header = ast.literal_eval(head[start : start + length].decode("latin1"))
        descr, shape = header["descr"], tuple(header["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError):
        return "torn: the .npy header cannot be read"
    item = _NPY_ITEM.fullmatch(descr) if isinstance(descr, str) else None
    if item is None:  # object or structured arrays: no fixed size
        return None
    expected = start + length + math.prod(shape) * int(item.group("size"))
    if expected != facts.size:
        return f"torn: the .npy header describes {expected} bytes, the file holds {facts.size}"
    return None


def _hdf5_problem(facts: FileFacts) -> str | None:
    """Superblock versions 0 and 1 keep the addresses after fixed fields, 2 and 3 right after the sizes."""
    head = facts.head
    if len(head) < 16:
        return "torn: shorter than the HDF5 superblock"
    version = head[8]
    if version in (0, 1):
        offsets, addresses_at = head[13], 24 if version == 0 else 28
    elif version in (2, 3):
        offsets, addresses_at = head[9], 12
    else:
        return None  # a superblock version this check does not know
    if offsets not in (2, 4, 8) or len(head) < addresses_at + 4 * offsets:
        return None if offsets in (2, 4, 8) else "torn: the HDF5 superblock cannot be read"
    fields = [int.from_bytes(head[addresses_at + i * offsets : addresses_at + (i + 1) * offsets], "little")
              for i in range(4)]
    base, end = fields[0], fields[2]  # base address, end-of-file address (v0/1: after free space; v2/3: after ext)
    if base + end > facts.size:
        return f"torn: the HDF5 superblock says the file ends at byte {base + end}, it holds {facts.size}"
    return None


def lightning_global_step(head: bytes) -> int | None:
    """The ``global_step`` a Lightning ``.ckpt`` (a ``torch.save`` zip) stores, from its first bytes."""
    return pickled_int(head, "global_step")


def pickled_int(head: bytes, key: str) -> int | None:
    """The integer stored under ``key`` in the pickle of a ``torch.save`` zip, from its first bytes.

    The pickle is walked opcode by opcode (``pickletools``), never unpickled: no
    code of the file runs. The first occurrence of the key, followed by an
    integer, wins (top-level keys come before nested ones in the checkpoints
    read this way). ``None`` when the bytes do not show it.
    """
    offset = 0
    while head[offset : offset + 4] == _ZIP_LOCAL and offset + 30 <= len(head):
        flags, method, _, _, compressed, _, name_length, extra_length = struct.unpack(
            "<HHIIIIHH", head[offset + 6 : offset + 30]
        )
        data_at = offset + 30 + name_length + extra_length
        name = head[offset + 30 : offset + 30 + name_length]
        if name.endswith(b"data.pkl"):
            # torch.save streams its records: sizes follow the data (flag bit 3), so the
            # pickle runs to its STOP opcode, read from here to the end of the head.
            sized = not flags & 0x8 and compressed != 0xFFFFFFFF
            end = data_at + compressed if sized else len(head)
            return _int_after(head[data_at:end], key) if method == 0 else None
        if flags & 0x8 or compressed == 0xFFFFFFFF:
            return None
        offset = data_at + compressed
    return None


def _int_after(pickle_bytes: bytes, key: str) -> int | None:
    last_string: object = None
    try:
        for opcode, argument, _ in pickletools.genops(io.BytesIO(pickle_bytes)):
            if opcode.name in _MEMO_OPCODES:
                continue
            if last_string == key and opcode.name in _INT_OPCODES and isinstance(argument, int):
                return argument
            last_string = argument if opcode.name in _STRING_OPCODES else None
    except (ValueError, EOFError, struct.error):  # the head ends inside the pickle
        return None
    return None
