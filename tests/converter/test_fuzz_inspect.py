"""Fuzz ``sdconvert inspect`` in-process with >= 200 mutated models: it must always return 0/1/2, never raise.

Mutants: random byte flips, random 4-byte overwrites, truncations of a small model with all three fused ops, and
well-formed models whose Sd* custom options are garbage (random bytes, wrong types, missing keys, out-of-range
values). Parsing is pure Python, so a crash would be an exception, which this test would catch and report.
"""

from __future__ import annotations

import contextlib
import io
import random
from pathlib import Path

import numpy as np
import pytest
from flatbuffers import flexbuffers

from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, Tensor, write_model
from sdconvert.inspect import main
from sdconvert.ops import get
from sdconvert.ops.attention import AttentionAttrs
from sdconvert.ops.gelu import GeluAttrs
from sdconvert.ops.group_norm import GroupNormAttrs

N_BYTE_MUTANTS = 180
ALL = ("SdAttention", "SdGelu", "SdGroupNorm")
_d = flexbuffers.Dumps
# (ops the options are put on, options bytes): every one is invalid for those ops
BAD_OPTIONS: list[tuple[tuple[str, ...], bytes]] = [
    (ALL, b""),
    (ALL, b"\x00"),
    (ALL, b"\xff" * 7),
    (ALL, bytes(_d([1, 2, 3]))),
    (ALL, bytes(_d(3.5))),
    (("SdAttention",), bytes(_d({"heads": "two", "head_dim": 4, "scale": 0.5}))),
    (("SdAttention",), bytes(_d({"head_dim": 4, "scale": 0.5}))),
    (("SdAttention",), bytes(_d({"heads": -3, "head_dim": 4, "scale": 0.5}))),
    (("SdAttention",), bytes(_d({"heads": 2, "head_dim": 4, "scale": float("nan")}))),
    (("SdAttention",), bytes(_d({"heads": 2, "head_dim": 4, "scale": 0.5, "variant": "magic"}))),
    (("SdGelu",), bytes(_d({"approximate": 7}))),
    (("SdGelu",), bytes(_d({"approximate": "cubic"}))),
    (("SdGroupNorm",), bytes(_d({"groups": 0}))),
    (("SdGroupNorm",), bytes(_d({"groups": 2, "channel_axis": 9}))),
    (("SdGroupNorm",), bytes(_d({"groups": 2, "activation": "relu"}))),
    (("SdGroupNorm",), bytes(_d({"eps": 1e-5}))),
]


def _model(options: dict[str, bytes] | None = None) -> Model:
    options = options or {}
    sg = Subgraph("main")
    q, k, v, o, g = (sg.add_tensor(Tensor(n, (1, 16, 8))) for n in ("q", "k", "v", "o", "g"))
    x4, y = sg.add_tensor(Tensor("x4", (1, 4, 4, 8))), sg.add_tensor(Tensor("y", (1, 4, 4, 8)))
    gamma, beta = sg.new_constant("gamma", np.ones(8, np.float32)), sg.new_constant("beta", np.zeros(8, np.float32))
    specs = [
        (get("SdAttention"), AttentionAttrs(2, 4, 0.5), [q, k, v], o),
        (get("SdGelu"), GeluAttrs("tanh"), [o], g),
    ]
    for spec, attrs, ins, out in specs:
        sg.ops.append(Op(OpCode.of(spec.name), ins, [out], custom_options=options.get(spec.name, spec.encode(attrs))))
    sg.ops.append(Op(OpCode.of("RESHAPE"), [g, sg.new_constant("shape", np.array([1, 4, 4, 8], np.int32))], [x4]))
    gn = get("SdGroupNorm")
    sg.ops.append(
        Op(
            OpCode.of(gn.name),
            [x4, gamma, beta],
            [y],
            custom_options=options.get(gn.name, gn.encode(GroupNormAttrs(2, 1e-5, "silu", -1))),
        )
    )
    sg.inputs, sg.outputs = [q, k, v], [y]
    return Model([sg], [SignatureDef("serving_default", sg, [("q", q), ("k", k), ("v", v)], [("y", y)])])


def _inspect(path: Path) -> int:
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        return main([str(path)])


def test_fuzzed_models_never_crash_inspect(tmp_path):
    base_path = write_model(_model(), tmp_path / "base.tflite")
    assert _inspect(base_path) == 0
    base = base_path.read_bytes()
    rng = random.Random(1234)
    codes: dict[int, int] = {}
    mutant = tmp_path / "mutant.tflite"
    for i in range(N_BYTE_MUTANTS):
        b = bytearray(base)
        kind = i % 3
        if kind == 0:
            for _ in range(rng.randint(1, 16)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif kind == 1:
            for _ in range(rng.randint(1, 4)):
                p = rng.randrange(len(b) - 4)
                b[p : p + 4] = rng.randbytes(4)
        else:
            b = b[: rng.randrange(len(b))]
        mutant.write_bytes(bytes(b))
        try:
            rc = _inspect(mutant)
        except BaseException as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"mutant {i} ({['flip', 'overwrite', 'truncate'][kind]}) raised {type(e).__name__}: {e}")
        assert rc in (0, 1, 2)
        codes[rc] = codes.get(rc, 0) + 1
    # the fuzzer really reaches both the parser's error path and the fused-op listing
    assert codes.get(2, 0) > 50 and codes.get(0, 0) + codes.get(1, 0) > 0

    n_bad = 0
    for j, (names, bad) in enumerate(BAD_OPTIONS):
        for name in names:
            n_bad += 1
            path = write_model(_model({name: bad}), tmp_path / f"bad{j}_{name}.tflite")
            try:
                rc = _inspect(path)
            except BaseException as e:  # noqa: BLE001
                pytest.fail(f"bad options {bad!r} on {name} raised {type(e).__name__}: {e}")
            assert rc == 1, (name, bad)
    assert N_BYTE_MUTANTS + n_bad >= 200
