"""A seeded corpus of malformed models made from real ones (the tiny fused + Winograd UNet and text encoder).

Every mutant is one of:

* ``flip`` / ``overwrite`` / ``truncate``: raw bytes (1-16 random bytes, one to four 4-byte words, a cut), in the
  flatbuffer's tables far more often than in the weights (a weight flip is not an error; see the manifest checksums);
* ``options``: an ``Sd*`` op's custom options replaced: another valid value of one attribute (which must run
  everywhere), random bytes, a bit-flipped flexbuffer, wrong types, missing keys, out-of-range values, and
  plausible-but-wrong sets (``heads=3``, groups that do not divide the channels, a
  Winograd tile of 3, a gated GELU on an odd width...);
* ``shape``: a tensor's shape changed (a dim to 0 / +1 / x2 / 2^31-1 / -1, a dim dropped or added), mostly on graph
  inputs (batch 0, a rank-4 ``encoder_hidden_states``) and on the inputs and outputs of fused ops;
* ``index``: an op's or the graph's input / output tensor index (-1 as a graph output included), an opcode index or
  a buffer index, out of range or pointing elsewhere;
* ``version``: a fused op's opcode version (0, 2, 99) or a builtin's (99);
* ``type``: a tensor's element type;
* ``opcode``: a custom op renamed (``SdGeluX``, ``SdFoo``, a foreign name) or a builtin code changed;
* ``signature``: a signature's tensor index.

Edits work on the bytes: a value is patched in place, or a new vector / table is appended at the end of the file and
the field or vector slot pointing to the old one is pointed to it (flatbuffer offsets only have to point forward, so
nothing else moves). That keeps a 300-model corpus to a few seconds: no re-packing of the 6 MB models.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
from flatbuffers import flexbuffers

from sdlite.flatbuffer_verify import Table, parse_model_buffer

KINDS = ("flip", "overwrite", "truncate", "options", "shape", "index", "version", "type", "opcode", "signature")
# how often each kind is drawn
WEIGHTS = (2, 1, 1, 3, 3, 2, 1, 1, 1, 1)
INT32, FLOAT16, INT8, FLOAT64 = 2, 1, 9, 10  # schema TensorType values
ADD, MUL, SOFTMAX, CUSTOM = 0, 18, 25, 32  # schema BuiltinOperator values


@dataclass(frozen=True)
class Mutant:
    name: str  # file stem, e.g. "017-unet-shape"
    base: str
    kind: str
    detail: str
    data: bytes


def _flex(value: object) -> bytes:
    return bytes(flexbuffers.Dumps(value))


# Plausible-but-wrong and plainly wrong options per fused op.
BAD_OPTIONS: dict[str, list[object]] = {
    "SdAttention": [
        {"heads": 3, "head_dim": 8, "scale": 0.35}, {"heads": 1, "head_dim": 3, "scale": 0.5},
        {"heads": 2, "head_dim": 0, "scale": 0.5}, {"heads": 2, "scale": 0.5},
        {"heads": "2", "head_dim": 8, "scale": 1}, {"heads": 2, "head_dim": 8, "scale": -1.0},
        {"heads": 2, "head_dim": 8, "scale": math.nan}, {"heads": 2, "head_dim": 8, "scale": 0.5, "variant": "fast"},
        {"heads": 2, "head_dim": 8, "scale": 0.5, "causal": 2}, {"heads": 2**40, "head_dim": 8, "scale": 0.5},
        [1, 2, 3],
    ],
    "SdGelu": [{"approximate": "cubic"}, {"approximate": 7}, {"gated": True}, {"gated": 3}, 3.5],
    "SdGroupNorm": [
        {"groups": 3}, {"groups": 0}, {"groups": 7, "channel_axis": 1}, {"groups": 2, "channel_axis": 0},
        {"groups": 2, "channel_axis": 2}, {"groups": 2, "eps": -1e-5}, {"groups": 2, "activation": "relu"},
        {"eps": 1e-5}, {"groups": 2**31}, "groups",
    ],
    "SdConv2DWinograd": [
        {"tile": 3, "padding": "SAME", "activation": "none"}, {"tile": 8, "padding": "SAME", "activation": "none"},
        {"tile": 4, "padding": "VALID", "activation": "none"}, {"tile": 4, "padding": "same", "activation": "none"},
        {"tile": 4, "padding": "SAME"}, {"tile": 4, "padding": "SAME", "activation": "gelu"},
        {"tile": 4, "padding": "SAME", "activation": "none", "extra": 1},
    ],
}
# One attribute changed to another valid value (keeping what the shapes depend on: heads, head_dim, groups, the
# channel axis, a gated GELU's gating, the conv padding).
_VALID_CHANGES: dict[str, list[tuple[str, object]]] = {
    "SdAttention": [("variant", "flash"), ("variant", "partial_softmax"), ("scale", 0.125), ("scale", 1.0),
                    ("causal", True)],
    "SdGelu": [("approximate", "none"), ("approximate", "tanh"), ("approximate", "quick")],
    "SdGroupNorm": [("eps", 1e-3), ("eps", 0.0), ("activation", "silu"), ("activation", "none")],
    "SdConv2DWinograd": [("tile", 2), ("tile", 6), ("activation", "relu"), ("activation", "relu6")],
}
SPECIAL_DIMS = (0, 1, 2, 3, 2**31 - 1, -1, 77, 4096)


# -- byte-level editing ----------------------------------------------------------------------------------------


def _field(data: bytes | bytearray, table_pos: int, slot: int) -> int | None:
    """Position of a table's field (``slot`` = vtable offset), None when the field is absent (its default)."""
    vtable = table_pos - struct.unpack_from("<i", data, table_pos)[0]
    vsize = struct.unpack_from("<H", data, vtable)[0]
    if slot >= vsize:
        return None
    off = struct.unpack_from("<H", data, vtable + slot)[0]
    return table_pos + off if off else None


def _vector(data: bytes | bytearray, table_pos: int, slot: int) -> int | None:
    """Position of the length word of a table's vector field."""
    at = _field(data, table_pos, slot)
    return None if at is None else at + struct.unpack_from("<I", data, at)[0]


def _align(data: bytearray, n: int) -> None:
    data.extend(b"\0" * (-len(data) % n))


def _point(data: bytearray, offset_at: int, target: int) -> None:
    struct.pack_into("<I", data, offset_at, target - offset_at)


def _append_vector(data: bytearray, payload: bytes, count: int) -> int:
    _align(data, 16)
    at = len(data)
    data.extend(struct.pack("<I", count) + payload)
    _align(data, 4)
    return at


def _append_string(data: bytearray, text: str) -> int:
    raw = text.encode()
    return _append_vector(data, raw + b"\0", len(raw))


def _append_table(data: bytearray, fields: list[tuple[int, str, object]]) -> int:
    """A new table at the end: ``(slot, struct letter or "str" / "ivec", value)`` fields; strings and int32 vectors
    are written after the table (forward offsets). Returns the table's position."""
    _align(data, 4)
    slots = [slot for slot, _, _ in fields]
    vsize = 4 + 2 * ((max(slots) - 4) // 2 + 1)
    body, offsets, pending = b"", {}, []
    for slot, kind, value in fields:
        fmt = "I" if kind in ("str", "ivec") else kind
        size = struct.calcsize("<" + fmt)
        pad = -(4 + len(body)) % size
        body += b"\0" * pad
        offsets[slot] = 4 + len(body)
        if kind in ("str", "ivec"):
            pending.append((offsets[slot], kind, value))
            body += b"\0\0\0\0"
        else:
            body += struct.pack("<" + fmt, value)
    body += b"\0" * (-len(body) % 4)
    vtable = struct.pack(f"<{vsize // 2}H", vsize, 4 + len(body), *[offsets.get(s, 0) for s in range(4, vsize, 2)])
    vtable += b"\0" * (-len(vtable) % 4)
    v_at = len(data)
    data.extend(vtable)
    t_at = len(data)
    data.extend(struct.pack("<i", t_at - v_at) + body)
    for off, kind, value in pending:
        target = _append_string(data, value) if kind == "str" else _append_vector(
            data, struct.pack(f"<{len(value)}i", *value), len(value))
        _point(data, t_at + off, target)
    return t_at


class _Base:
    """One base model: its bytes, its parsed tables, and which bytes are tables (not weights)."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data = name, data
        self.tree = parse_model_buffer(data)
        self.sg = self.tree.get(8)[0]
        self.ops: list[Table] = self.sg.get(10, [])
        self.tensors: list[Table] = self.sg.get(4, [])
        self.codes: list[Table] = self.tree.get(6, [])
        weight = np.zeros(len(data), dtype=bool)
        for b in self.tree.get(12, []):
            start, n = b.get(4, (0, 0))
            weight[start : start + n] = True
        self.table_bytes = np.flatnonzero(~weight)
        self.weight_bytes = np.flatnonzero(weight)
        self.fused_ops = [i for i, op in enumerate(self.ops) if self.custom(op) is not None]

    def custom(self, op: Table) -> str | None:
        name = self.codes[op.get(4, 0)].get(6)
        return name if name and name.startswith("Sd") else None


class _Mutator:
    def __init__(self, base: _Base, rng: np.random.Generator) -> None:
        self.b, self.rng = base, rng
        self.data = bytearray(base.data)

    def pick(self, seq: list | tuple) -> object:
        return seq[int(self.rng.integers(len(seq)))]

    # -- raw bytes ---------------------------------------------------------------------------------------------
    def _position(self) -> int:
        pool = self.b.table_bytes if self.rng.random() < 0.9 or not len(self.b.weight_bytes) else self.b.weight_bytes
        return int(pool[int(self.rng.integers(len(pool)))])

    def flip(self) -> str:
        n = int(self.rng.integers(1, 17))
        for _ in range(n):
            self.data[self._position()] = int(self.rng.integers(256))
        return f"{n} random bytes"

    def overwrite(self) -> str:
        n = int(self.rng.integers(1, 5))
        for _ in range(n):
            p = min(self._position() & ~3, len(self.data) - 4)
            word = int(self.pick([0, 1, 2**31 - 1, 2**32 - 1, int(self.rng.integers(2**32))]))
            self.data[p : p + 4] = word.to_bytes(4, "little")
        return f"{n} 4-byte words"

    def truncate(self) -> str:
        cut = int(self.rng.integers(len(self.data)))
        del self.data[cut:]
        return f"cut at {cut}"

    # -- structural ----------------------------------------------------------------------------------------------
    def options(self) -> str:
        oi = int(self.pick(self.b.fused_ops))
        op = self.b.ops[oi]
        name = self.b.custom(op)
        start, n = op.get(14, (0, 0))
        old = bytes(self.b.data[start : start + n])
        r = self.rng.random()
        if r < 0.35:
            value = self.pick(BAD_OPTIONS[name])
            blob, what = _flex(value), f"{value!r}"
        elif r < 0.5 and old:  # another valid value of one attribute: the mutant must run everywhere
            attrs = dict(flexbuffers.Loads(old))
            key, value = self.pick(_VALID_CHANGES[name])
            attrs[key] = value
            blob, what = _flex(attrs), f"valid {key}={value!r}"
        elif r < 0.7 and old:
            raw = bytearray(old)
            for _ in range(int(self.rng.integers(1, 4))):
                raw[int(self.rng.integers(len(raw)))] ^= 1 << int(self.rng.integers(8))
            blob, what = bytes(raw), "flipped bits"
        elif r < 0.85:
            blob = self.rng.integers(0, 256, int(self.rng.integers(0, 48)), dtype=np.uint8).tobytes()
            what = f"{len(blob)} random bytes"
        else:
            blob, what = b"", "no options"
        _point(self.data, _field(self.data, op.pos, 14), _append_vector(self.data, blob, len(blob)))
        return f"op {oi} ({name}) options = {what}"

    def _tensor_target(self) -> int:
        r = self.rng.random()
        if r < 0.35:
            return int(self.pick(self.b.sg.get(6)))
        if r < 0.75:
            op = self.b.ops[int(self.pick(self.b.fused_ops))]
            return int(self.pick([t for t in op.get(6, ()) + op.get(8, ()) if t >= 0]))
        return int(self.rng.integers(len(self.b.tensors)))

    def shape(self) -> str:
        ti = self._tensor_target()
        t = self.b.tensors[ti]
        shape = list(t.get(4, ()))
        new = list(shape)
        r = self.rng.random()
        if r < 0.6 and new:
            k = int(self.rng.integers(len(new)))
            new[k] = int(self.pick([*SPECIAL_DIMS, new[k] + 1, new[k] * 2, max(new[k] - 1, 0)]))
        elif r < 0.8 and len(new) > 1:
            new.pop(int(self.rng.integers(len(new))))
        else:
            new.insert(int(self.rng.integers(len(new) + 1)), int(self.pick([1, 1, 2, 3])))
        for slot in (4, 18):  # shape, and shape_signature where the converter wrote one
            at = _field(self.data, t.pos, slot)
            if at is not None:
                _point(self.data, at, _append_vector(self.data, struct.pack(f"<{len(new)}i", *new), len(new)))
        return f"tensor {ti} shape {shape} -> {new}"

    def _patch_index(self, vec: int, k: int, value: int) -> None:
        struct.pack_into("<i", self.data, vec + 4 + 4 * k, value)

    def index(self) -> str:
        n = len(self.b.tensors)
        bad = int(self.pick([-1, -2, n, n + 7, 2**31 - 1, int(self.rng.integers(n))]))
        r = self.rng.random()
        if r < 0.25:
            which, slot = self.pick([("outputs", 8), ("inputs", 6)])
            vec = _vector(self.data, self.b.sg.pos, slot)
            k = int(self.rng.integers(len(self.b.sg.get(slot))))
            self._patch_index(vec, k, bad)
            return f"graph {which}[{k}] = {bad}"
        if r < 0.8:
            fused = self.rng.random() < 0.5
            oi = int(self.pick(self.b.fused_ops)) if fused else int(self.rng.integers(len(self.b.ops)))
            op = self.b.ops[oi]
            which, slot = self.pick([("inputs", 6), ("outputs", 8)])
            if not op.get(slot):
                which, slot = "inputs", 6
            k = int(self.rng.integers(len(op.get(slot))))
            self._patch_index(_vector(self.data, op.pos, slot), k, bad)
            return f"op {oi} {which}[{k}] = {bad}"
        if r < 0.9:
            ops = [i for i, op in enumerate(self.b.ops) if _field(self.data, op.pos, 4) is not None]
            oi = int(self.pick(ops))
            value = int(self.pick([len(self.b.codes), 2**31 - 1, int(self.rng.integers(len(self.b.codes)))]))
            struct.pack_into("<I", self.data, _field(self.data, self.b.ops[oi].pos, 4), value)
            return f"op {oi} opcode index = {value}"
        n_buf = len(self.b.tree.get(12))
        tensors = [i for i, t in enumerate(self.b.tensors) if _field(self.data, t.pos, 8) is not None]
        ti = int(self.pick(tensors))
        value = int(self.pick([n_buf, 2**31, 0, int(self.rng.integers(n_buf))]))
        struct.pack_into("<I", self.data, _field(self.data, self.b.tensors[ti].pos, 8), value)
        return f"tensor {ti} buffer = {value}"

    def _replace_code(self, ci: int, *, custom: str | None = None, version: int | None = None,
                      builtin: int | None = None) -> None:
        """Point operator_codes[ci] to a new OperatorCode table with these fields changed."""
        c = self.b.codes[ci]
        b = c.get(10, 0) if builtin is None else builtin
        name = c.get(6) if custom is None else custom
        fields: list[tuple[int, str, object]] = [(4, "b", min(b, 127)), (8, "i", c.get(8, 1) if version is None
                                                                          else version), (10, "i", b)]
        if name is not None:
            fields.append((6, "str", name))
        vec = _vector(self.data, self.b.tree.pos, 6)
        _point(self.data, vec + 4 + 4 * ci, _append_table(self.data, sorted(fields)))

    def version(self) -> str:
        fused = [i for i, c in enumerate(self.b.codes) if c.get(6)]
        if fused and self.rng.random() < 0.75:
            ci, value = int(self.pick(fused)), int(self.pick([0, 2, 99]))
        else:
            ci, value = int(self.rng.integers(len(self.b.codes))), 99
        self._replace_code(ci, version=value)
        return f"opcode {ci} ({self.b.codes[ci].get(6) or 'builtin'}) version = {value}"

    def opcode(self) -> str:
        fused = [i for i, c in enumerate(self.b.codes) if c.get(6)]
        if fused and self.rng.random() < 0.7:
            ci = int(self.pick(fused))
            old = self.b.codes[ci].get(6)
            value = str(self.pick([old + "X", "SdFoo", "MyCustomOp", "Sd", old.lower()]))
            self._replace_code(ci, custom=value)
            return f"opcode {ci} custom code {old} -> {value}"
        ci = int(self.rng.integers(len(self.b.codes)))
        value = int(self.pick([ADD, MUL, SOFTMAX, CUSTOM, 250]))
        self._replace_code(ci, builtin=value)
        return f"opcode {ci} builtin -> {value}"

    def type(self) -> str:
        ti = self._tensor_target()
        t = self.b.tensors[ti]
        value = int(self.pick([INT32, FLOAT16, INT8, FLOAT64, 23, 99]))
        fields: list[tuple[int, str, object]] = [(4, "ivec", list(t.get(4, ()))), (6, "b", value), (8, "I", t.get(8, 0)),
                                                 (10, "str", t.get(10, ""))]
        if t.get(18) is not None:
            fields.append((18, "ivec", list(t.get(18))))
        vec = _vector(self.data, self.b.sg.pos, 4)
        _point(self.data, vec + 4 + 4 * ti, _append_table(self.data, fields))
        return f"tensor {ti} type = {value}"

    def signature(self) -> str:
        sd = self.b.tree.get(18)[0]
        maps = [m for m in sd.get(4, []) + sd.get(6, []) if _field(self.data, m.pos, 6) is not None]
        m = maps[int(self.rng.integers(len(maps)))]
        n = len(self.b.tensors)
        value = int(self.pick([2**32 - 1, n, int(self.rng.integers(n))]))
        struct.pack_into("<I", self.data, _field(self.data, m.pos, 6), value)
        return f"signature tensor {m.get(4)!r} -> {value}"


class Corpus:
    """``Corpus(bases, seed)[i]`` is mutant ``i``: bases alternate, the kind is drawn with :data:`WEIGHTS`, and each
    mutant has its own random stream (seed, i), so any mutant can be rebuilt alone and the same seed gives the same
    bytes."""

    def __init__(self, bases: dict[str, bytes], seed: int) -> None:
        self.bases = [_Base(name, data) for name, data in bases.items()]
        self.seed = seed
        self.p = np.asarray(WEIGHTS, dtype=float) / sum(WEIGHTS)

    def __getitem__(self, i: int) -> Mutant:
        rng = np.random.default_rng([self.seed, i])
        base = self.bases[i % len(self.bases)]
        kind = KINDS[int(rng.choice(len(KINDS), p=self.p))]
        mut = _Mutator(base, rng)
        detail = getattr(mut, kind)()
        return Mutant(f"{i:03d}-{base.name}-{kind}", base.name, kind, detail, bytes(mut.data))

    def gpu_share(self, count: int, fraction: float = 0.25) -> set[int]:
        """A seeded ``fraction`` of the indices ``0..count-1`` (those also run on the GPU backends)."""
        rng = np.random.default_rng([self.seed, 2**31])
        return {int(i) for i in rng.choice(count, size=int(round(count * fraction)), replace=False)}


__all__ = ["KINDS", "Corpus", "Mutant"]
