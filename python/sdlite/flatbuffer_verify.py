"""A flatbuffers verifier for the TFLite schema, in pure Python: every offset, vector and string a reader can follow
is checked to lie inside the file before anything reads the model.

It follows ``flatbuffers::Verifier`` as TFLite's ``VerifyModelBuffer`` runs it (file identifier ``TFL3``, 4-byte
aligned offsets, non-zero forward offsets, vector lengths within the buffer, NUL-terminated strings, at most 64 nested
tables and 1,000,000 tables in all; strings must also be valid UTF-8, which TFLite's Python API needs), over the tables of ``schema.fbs`` that a model's structure is made of. The builtin
option tables (a union of ~150 types) are checked as tables; their vector and string fields are listed below (the
other option fields are scalars, which only need to lie inside the file). A union member of a type this schema does
not know is accepted, as flatbuffers does.

Why Python and not TFLite's own verifier: ``sdlite``'s readers (:mod:`sdlite.tflite_info`, :mod:`sdlite.model_check`)
read the file before any interpreter exists, and a verified buffer is what makes those reads safe and their errors one
line. TFLite still runs its verifier when the interpreter is built, so the two checks back each other up.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

FLATBUFFER_MAX_SIZE = 2**31 - 1
MAX_DEPTH = 64
MAX_TABLES = 1_000_000
IDENTIFIER = b"TFL3"


class FlatbufferError(ValueError):
    """The bytes are not a well-formed TFLite flatbuffer (one-line reason with the byte position)."""

    def about(self, name: object) -> str:
        """The message about the file ``name``: ``"x.tflite is not a .tflite model ..."`` or
        ``"x.tflite: corrupt flatbuffer: ..."``."""
        text = str(self)
        return f"{name} {text}" if text.startswith("is ") else f"{name}: {text}"


@dataclass(frozen=True)
class Vec:
    """A vector field: a ``struct`` format letter (``"raw"``: bytes kept as a ``(start, length)`` span, not read), a
    table name (vector of tables) or ``"str"`` (vector of strings)."""

    elem: str


@dataclass(frozen=True)
class Tab:
    name: str


@dataclass(frozen=True)
class Union:
    type_field: int  # vtable offset of the union's type byte
    members: str  # key of UNIONS


STR = "string"
RAW = "raw"
_SIZE = {"b": 1, "B": 1, "?": 1, "h": 2, "H": 2, "i": 4, "I": 4, "f": 4, "q": 8, "Q": 8, RAW: 1}

# {table: {vtable offset: kind}} (vtable offset = 4 + 2 * field id, as the generated readers use them). A scalar is
# its struct format letter.
TABLES: dict[str, dict[int, Any]] = {
    "Model": {4: "I", 6: Vec("OperatorCode"), 8: Vec("SubGraph"), 10: STR, 12: Vec("Buffer"), 14: Vec("i"),
              16: Vec("Metadata"), 18: Vec("SignatureDef"), 20: Vec("ExternalBufferGroup"), 22: Vec("ExternalBuffer")},
    "OperatorCode": {4: "b", 6: STR, 8: "i", 10: "i"},
    "SubGraph": {4: Vec("Tensor"), 6: Vec("i"), 8: Vec("i"), 10: Vec("Operator"), 12: STR, 14: "i"},
    "Tensor": {4: Vec("i"), 6: "b", 8: "I", 10: STR, 12: Tab("QuantizationParameters"), 14: "?",
               16: Tab("SparsityParameters"), 18: Vec("i"), 20: "?", 22: Vec("VariantSubType"), 24: "I"},
    "VariantSubType": {4: Vec("i"), 6: "b", 8: "?"},
    "QuantizationParameters": {4: Vec("f"), 6: Vec("f"), 8: Vec("f"), 10: Vec("q"), 12: "B",
                               14: Union(12, "QuantizationDetails"), 16: "i"},
    "CustomQuantization": {4: Vec(RAW)},
    "BlockwiseQuantization": {4: "i", 6: "i", 8: "i", 10: Vec("i")},
    "SparsityParameters": {4: Vec("i"), 6: Vec("i"), 8: Vec("DimensionMetadata")},
    "DimensionMetadata": {4: "b", 6: "i", 8: "B", 10: Union(8, "SparseIndexVector"), 12: "B",
                          14: Union(12, "SparseIndexVector")},
    "Int32Vector": {4: Vec("i")},
    "Uint16Vector": {4: Vec("H")},
    "Uint8Vector": {4: Vec(RAW)},
    "Buffer": {4: Vec(RAW), 6: "Q", 8: "Q"},
    "Metadata": {4: STR, 6: "I"},
    "TensorMap": {4: STR, 6: "I"},
    "SignatureDef": {4: Vec("TensorMap"), 6: Vec("TensorMap"), 8: STR, 12: "I"},
    "ExternalBufferGroup": {4: STR},
    "ExternalBuffer": {4: "I", 6: "I", 8: "Q", 10: "Q", 12: STR},
    "Operator": {4: "I", 6: Vec("i"), 8: Vec("i"), 10: "B", 12: Union(10, "BuiltinOptions"), 14: Vec(RAW), 16: "b",
                 18: Vec(RAW), 20: Vec("i"), 22: "Q", 24: "Q", 26: "B", 28: Union(26, "BuiltinOptions2"), 30: "i"},
    # builtin option tables with vector or string fields (every other field of every option table is a scalar)
    "BucketizeOptions": {4: Vec("f")},
    "ConcatEmbeddingsOptions": {6: Vec("i"), 8: Vec("i")},
    "FullyConnectedOptions": {4: "b", 6: "b", 8: "?", 10: "?", 12: "b", 14: Vec(RAW)},
    "ReshapeOptions": {4: Vec("i")},
    "SqueezeOptions": {4: Vec("i")},
    "VarHandleOptions": {4: STR, 6: STR},
    "StableHLOCompositeOptions": {4: STR, 8: Vec(RAW)},
    "StablehloBroadcastInDimOptions": {4: Vec("q")},
    "StablehloCaseOptions": {4: Vec("i")},
    "StablehloConvolutionOptions": {4: Vec("q"), 6: Vec("q"), 8: Vec("q"), 10: Vec("q"), 12: Vec(RAW), 18: Vec("q"),
                                    24: Vec("q"), 30: Vec("q"), 36: Vec("I")},
    "StablehloCustomCallOptions": {4: STR, 8: STR, 12: Vec("i"), 14: Vec(RAW)},
    "StablehloDotGeneralOptions": {4: Vec("q"), 6: Vec("q"), 8: Vec("q"), 10: Vec("q"), 12: Vec("I")},
    "StablehloDynamicSliceOptions": {4: Vec("q")},
    "StablehloGatherOptions": {4: Vec("q"), 6: Vec("q"), 8: Vec("q"), 12: Vec("q")},
    "StablehloPadOptions": {4: Vec("q"), 6: Vec("q"), 8: Vec("q")},
    "StablehloReduceOptions": {4: Vec("q")},
    "StablehloReduceWindowOptions": {4: Vec("q"), 6: Vec("q"), 8: Vec("q"), 10: Vec("q"), 12: Vec("q")},
    "StablehloScatterOptions": {6: Vec("q"), 8: Vec("q"), 10: Vec("q")},
    "StablehloSliceOptions": {4: Vec("q"), 6: Vec("q"), 8: Vec("q")},
    "StablehloTransposeOptions": {4: Vec("q")},
    # options the model validator's shape rules read (sdlite/shape_rules.py)
    "Conv2DOptions": {4: "b", 6: "i", 8: "i", 10: "b", 12: "i", 14: "i", 16: "b"},
    "ConcatenationOptions": {4: "i", 6: "b"},
    "ReducerOptions": {4: "?"},
    "BatchMatMulOptions": {4: "?", 6: "?", 8: "?"},
    "GatherOptions": {4: "i", 6: "i"},
    # control flow (the subgraph indices the model validator checks)
    "IfOptions": {4: "i", 6: "i"},
    "WhileOptions": {4: "i", 6: "i"},
    "CallOnceOptions": {4: "i"},
}
GENERIC_TABLE: dict[int, Any] = {}  # an option table without vector/string fields: structure only

# Unions: (largest type value this schema knows, {type value: table name} for the members listed in TABLES; the
# other known members are option tables of scalars, checked as generic tables). Values from schema.fbs.
UNIONS: dict[str, tuple[int, dict[int, str]]] = {
    "BuiltinOptions": (126, {1: "Conv2DOptions", 10: "ConcatenationOptions", 23: "GatherOptions",
                             27: "ReducerOptions", 101: "BatchMatMulOptions",
                             3: "ConcatEmbeddingsOptions", 8: "FullyConnectedOptions", 17: "ReshapeOptions",
                             30: "SqueezeOptions", 111: "VarHandleOptions", 115: "BucketizeOptions",
                             92: "IfOptions", 93: "WhileOptions", 103: "CallOnceOptions"}),
    "BuiltinOptions2": (23, {2: "StablehloBroadcastInDimOptions", 3: "StablehloSliceOptions",
                             4: "StablehloConvolutionOptions", 5: "StablehloCustomCallOptions",
                             6: "StablehloReduceOptions", 7: "StablehloScatterOptions",
                             9: "StablehloDynamicSliceOptions", 10: "StablehloPadOptions",
                             12: "StablehloDotGeneralOptions", 13: "StablehloReduceWindowOptions",
                             16: "StablehloGatherOptions", 17: "StablehloTransposeOptions",
                             21: "StableHLOCompositeOptions", 23: "StablehloCaseOptions"}),
    "QuantizationDetails": (3, {1: "CustomQuantization", 2: "BlockwiseQuantization"}),
    "SparseIndexVector": (3, {1: "Int32Vector", 2: "Uint16Vector", 3: "Uint8Vector"}),
}


class Table:
    """A verified table: its schema name and the values of the fields present, by vtable offset (scalars as numbers,
    strings as str, numeric vectors as tuples, raw byte vectors as ``(start, length)``, tables as :class:`Table`,
    vectors of tables as lists). Absent fields are absent: :meth:`get` gives the schema default you pass."""

    __slots__ = ("name", "pos", "fields")

    def __init__(self, name: str, pos: int, fields: dict[int, Any]) -> None:
        self.name, self.pos, self.fields = name, pos, fields

    def get(self, slot: int, default: Any = None) -> Any:
        return self.fields.get(slot, default)


class _Verifier:
    def __init__(self, buf: Any) -> None:
        self.buf = buf
        self.size = min(len(buf), FLATBUFFER_MAX_SIZE)
        self.tables = 0

    def fail(self, what: str, pos: int) -> FlatbufferError:
        return FlatbufferError(f"corrupt flatbuffer: {what} at byte {pos} (file has {len(self.buf)} bytes)")

    def need(self, pos: int, n: int, align: int, what: str) -> None:
        if pos < 0 or n < 0 or pos + n > self.size:
            raise self.fail(f"{what} runs past the end", pos)
        if align > 1 and pos % align:
            raise self.fail(f"{what} is misaligned", pos)

    def u32(self, pos: int, what: str) -> int:
        self.need(pos, 4, 4, what)
        return struct.unpack_from("<I", self.buf, pos)[0]

    def offset(self, pos: int, what: str) -> int:
        """Target of the uoffset stored at ``pos`` (flatbuffers' VerifyOffset)."""
        o = self.u32(pos, what)
        if o == 0 or o >= 2**31:
            raise self.fail(f"{what} has offset {o}", pos)
        self.need(pos + o, 1, 1, what)
        return pos + o

    def vector(self, pos: int, elem_size: int, what: str) -> int:
        n = self.u32(pos, what)
        if n >= FLATBUFFER_MAX_SIZE // elem_size:
            raise self.fail(f"{what} claims {n} elements", pos)
        self.need(pos, 4 + n * elem_size, 4, what)
        return n

    def string(self, pos: int, what: str) -> str:
        n = self.vector(pos, 1, what)
        end = pos + 4 + n
        self.need(end, 1, 1, what)
        if self.buf[end] != 0:
            raise self.fail(f"{what} is not NUL-terminated", end)
        try:  # the schema's strings are UTF-8, and TFLite's Python API decodes them strictly
            return bytes(self.buf[pos + 4 : end]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8", pos) from None

    def table(self, pos: int, name: str, depth: int) -> Table:
        if depth > MAX_DEPTH:
            raise self.fail(f"tables nested deeper than {MAX_DEPTH}", pos)
        self.tables += 1
        if self.tables > MAX_TABLES:
            raise self.fail(f"more than {MAX_TABLES} tables", pos)
        # (the checks of need() written out where they run per table or field, their messages made only on failure:
        # SD1.5's UNet has ~15k tables and ~100k fields, and formatting a message for each took a third of the walk)
        if pos < 0 or pos + 4 > self.size or pos % 4:
            self.need(pos, 4, 4, f"{name} table")
        vtable = pos - struct.unpack_from("<i", self.buf, pos)[0]
        if vtable < 0 or vtable + 2 > self.size or vtable % 2:
            self.need(vtable, 2, 2, f"{name} vtable")
        vsize = struct.unpack_from("<H", self.buf, vtable)[0]
        if vsize & 1 or vsize < 4:
            raise self.fail(f"{name} vtable has size {vsize}", vtable)
        if vtable + vsize > self.size:
            self.need(vtable, vsize, 2, f"{name} vtable")
        schema = TABLES.get(name, GENERIC_TABLE)
        slots = struct.unpack_from(f"<{(vsize - 4) // 2}H", self.buf, vtable + 4)
        values: dict[int, Any] = {}
        size_limit = self.size
        for k, field_off in enumerate(slots):
            if not field_off:
                continue
            slot = 4 + 2 * k
            at = pos + field_off
            kind = schema.get(slot)
            if kind is None:  # a field this schema does not list: a scalar of at least one byte
                if at + 1 > size_limit:
                    self.need(at, 1, 1, f"{name} field {k}")
                continue
            if isinstance(kind, str) and kind != STR:
                size = _SIZE[kind]
                if at + size > size_limit or at % size:
                    self.need(at, size, size, f"{name} field {k}")
                values[slot] = struct.unpack_from("<" + kind, self.buf, at)[0]
                continue
            what = f"{name} field {k}"
            if kind == STR:
                values[slot] = self.string(self.offset(at, what), what)
            elif isinstance(kind, Tab):
                values[slot] = self.table(self.offset(at, what), kind.name, depth + 1)
            elif isinstance(kind, Vec):
                values[slot] = self.vec_field(self.offset(at, what), kind, what, depth)
            elif isinstance(kind, Union):
                type_slot = (kind.type_field - 4) // 2
                utype = self.buf[pos + slots[type_slot]] if type_slot < len(slots) and slots[type_slot] else 0
                largest, members = UNIONS[kind.members]
                if 0 < utype <= largest:  # flatbuffers accepts a type it does not know without looking
                    values[slot] = self.table(self.offset(at, what), members.get(utype, "option table"), depth + 1)
        return Table(name, pos, values)

    def vec_field(self, pos: int, kind: Vec, what: str, depth: int) -> Any:
        elem = kind.elem
        if elem == RAW:
            return (pos + 4, self.vector(pos, 1, what))
        if elem in _SIZE:
            n = self.vector(pos, _SIZE[elem], what)
            return struct.unpack_from(f"<{n}{elem}", self.buf, pos + 4)
        n = self.vector(pos, 4, what)
        out = []
        for i in range(n):
            at = pos + 4 + 4 * i
            target = at + struct.unpack_from("<I", self.buf, at)[0]
            out.append(self.string(target, what) if elem == "str" else self.table(target, elem, depth + 1))
        return out


def parse_model_buffer(buf: Any) -> Table:
    """Verify ``buf`` (bytes, mmap, memoryview) as a TFLite flatbuffer and return its root ``Model`` table.

    Raises :class:`FlatbufferError`. For a file over 2 GiB (TFLite's offset-buffer layout) the flatbuffer is the
    first 2 GiB at most, as in TFLite.
    """
    if len(buf) < 8:
        raise FlatbufferError(f"is too small to be a .tflite model ({len(buf)} bytes)")
    if bytes(buf[4:8]) != IDENTIFIER:
        raise FlatbufferError("is not a .tflite model (no TFL3 identifier)")
    v = _Verifier(buf)
    try:
        return v.table(v.offset(0, "root offset"), "Model", 1)
    except (struct.error, IndexError) as e:  # a read the checks above should have prevented
        raise FlatbufferError(f"corrupt flatbuffer ({type(e).__name__})") from None


def verify_model_buffer(buf: Any) -> None:
    """:func:`parse_model_buffer` for its checks only."""
    parse_model_buffer(buf)


__all__ = ["FlatbufferError", "Table", "parse_model_buffer", "verify_model_buffer"]
