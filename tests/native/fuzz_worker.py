"""Fuzz loop for the native delegate, run in a subprocess by test_fuzz.py so that a crash is a test failure.

Two levels:
1. ``--blobs``: mutated options blobs straight into the C++ parsers (``sdgpu_check_op_options``).
2. ``--models``: tiny single-op models with mutated options and/or mutated tensor shapes/types through
   ``Interpreter`` + delegate: allocate and, when the node was claimed, invoke on random inputs.
Prints one JSON line with the tallies; exit code 0 means no crash and no unexpected exception.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import warnings

import numpy as np

from harness import make_interpreter
from sdlite import native
from tflite_models import GraphBuilder, flex

SEED_OPTIONS = {
    "SdAttention": [
        {"heads": 2, "head_dim": 4, "scale": 0.5, "causal": False, "variant": "flash"},
        {"heads": 1, "head_dim": 8, "scale": 0.35, "causal": True, "variant": "partial_softmax"},
        {"heads": 2, "head_dim": 4, "scale": 1},
    ],
    "SdGelu": [{"approximate": "none"}, {"approximate": "tanh"}, {"approximate": "quick"}, {}],
    "SdGroupNorm": [
        {"groups": 2, "eps": 1e-5, "activation": "silu", "channel_axis": -1},
        {"groups": 4, "eps": 1e-6, "activation": "none", "channel_axis": 1},
        {"groups": 1},
    ],
}
# Parser-level only (no model builder here): ops whose kernels are tested elsewhere.
PARSER_ONLY_OPTIONS = {
    "SdConv2DWinograd": [{"tile": 4, "padding": "SAME", "activation": "none"}, {"tile": 2, "padding": "VALID",
                                                                                 "activation": "relu6"}],
}
SPECIAL_BYTES = (0x00, 0x01, 0x02, 0x03, 0x04, 0x07, 0x08, 0x24, 0x25, 0x26, 0x27, 0x7F, 0x80, 0xFE, 0xFF)


def mutate(rng: np.random.Generator, blob: bytes, pool: list[bytes]) -> bytes:
    data = bytearray(blob)
    for _ in range(int(rng.integers(1, 4))):
        kind = int(rng.integers(0, 8))
        if kind == 0 and data:  # bit flips
            for _ in range(int(rng.integers(1, 9))):
                i = int(rng.integers(len(data)))
                data[i] ^= 1 << int(rng.integers(8))
        elif kind == 1 and data:  # special byte
            data[int(rng.integers(len(data)))] = SPECIAL_BYTES[int(rng.integers(len(SPECIAL_BYTES)))]
        elif kind == 2 and data:  # truncate
            del data[int(rng.integers(len(data))):]
        elif kind == 3:  # insert random bytes
            i = int(rng.integers(len(data) + 1))
            data[i:i] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        elif kind == 4:  # splice with another blob
            other = pool[int(rng.integers(len(pool)))]
            cut = int(rng.integers(len(data) + 1))
            data = data[:cut] + bytearray(other[int(rng.integers(len(other) + 1)):])
        elif kind == 5 and len(data) >= 2:  # root width / root type bytes
            data[-1 - int(rng.integers(2))] = int(rng.integers(256))
        elif kind == 6:  # fully random
            data = bytearray(rng.integers(0, 256, int(rng.integers(0, 65)), dtype=np.uint8).tobytes())
        elif kind == 7 and data:  # byte-width / offset fields: small integers
            data[int(rng.integers(len(data)))] = int(rng.integers(0, 16))
    return bytes(data)


def mutate_dict(rng: np.random.Generator, options: dict) -> dict:
    """Type/value confusion at the attrs level (the encoding stays valid)."""
    out = dict(options)
    values = [0, 1, -1, 2, 3, 2**31, -(2**40), 0.0, -1.0, 1e-30, 1e30, math.nan, math.inf, True, False, None,
              "", "flash", "silu", "tanh", "x" * 300, b"none", [1, 2], {"a": 1}]
    keys = list(out) + ["heads", "head_dim", "scale", "groups", "eps", "channel_axis", "variant", "junk"]
    for _ in range(int(rng.integers(1, 3))):
        key = keys[int(rng.integers(len(keys)))]
        if rng.random() < 0.2:
            out.pop(key, None)
        else:
            out[key] = values[int(rng.integers(len(values)))]
    return out


def random_shape(rng: np.random.Generator, base: list[int]) -> list[int]:
    shape = list(base)
    r = rng.random()
    if r < 0.3:
        shape[int(rng.integers(len(shape)))] = int(rng.integers(0, 10))
    elif r < 0.45 and len(shape) > 1:
        shape.pop(int(rng.integers(len(shape))))
    elif r < 0.6:
        shape.insert(int(rng.integers(len(shape) + 1)), int(rng.integers(1, 4)))
    return shape


def build_model(rng: np.random.Generator, op: str, options: bytes | None, mutate_tensors: bool) -> bytes:
    g = GraphBuilder()

    def shape(base):
        return random_shape(rng, base) if mutate_tensors else base

    def dtype():
        return np.int32 if mutate_tensors and rng.random() < 0.1 else np.float32

    if op == "SdAttention":
        ins = [g.input(n, shape(s), dtype()) for n, s in (("q", [1, 5, 8]), ("k", [1, 6, 8]), ("v", [1, 6, 8]))]
        if mutate_tensors and rng.random() < 0.15:
            ins = ins[: int(rng.integers(0, 3))]
        out = g.tensor("o", shape([1, 5, 8]))
    elif op == "SdGelu":
        ins = [g.input("x", shape([2, 3, 4]), dtype())]
        out = g.tensor("y", shape([2, 3, 4]))
    else:
        c = 8
        ins = [g.input("x", shape([1, 3, 3, c]), dtype())]
        ins.append(g.const("gamma", np.ones(shape([c])[:1] or [1], np.float32)))
        ins.append(g.const("beta", np.zeros([c], np.float32)))
        out = g.tensor("y", shape([1, 3, 3, c]))
    g.custom(op, ins, [out], options)
    g.output(out)
    return g.build()


def run_model(model: bytes, rng: np.random.Generator) -> str:
    delegate = native.load(num_threads=2, log_level="silent", attention_block_q=2, attention_block_k=3)
    try:
        interpreter = make_interpreter(model, delegate)
        interpreter.allocate_tensors()
    except (RuntimeError, ValueError) as exc:
        stats = native.stats(delegate)
        if stats["declined_nodes"] == 1 or "unresolved" in str(exc):
            return "declined"
        return "rejected_by_runtime"
    stats = native.stats(delegate)
    if stats["claimed_nodes"] != 1:
        return "unexpected_no_claim"
    for detail in interpreter.get_input_details():
        shape = detail["shape"]
        if detail["dtype"] == np.float32:
            interpreter.set_tensor(detail["index"], rng.standard_normal(shape).astype(np.float32))
    interpreter.invoke()
    interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    return "claimed_ran"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blobs", type=int, default=3000)
    parser.add_argument("--models", type=int, default=240)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    warnings.simplefilter("ignore")

    all_options = {**SEED_OPTIONS, **PARSER_ONLY_OPTIONS}
    pool = [flex(o) for cases in all_options.values() for o in cases]
    parser_ops = list(all_options)
    ops = list(SEED_OPTIONS)
    tally: dict[str, int] = {"blobs": 0, "blobs_accepted": 0}
    for _ in range(args.blobs):
        op = parser_ops[int(rng.integers(len(parser_ops)))]
        blob = mutate(rng, pool[int(rng.integers(len(pool)))], pool)
        ok, _ = native.check_op_options(op, blob)
        tally["blobs"] += 1
        tally["blobs_accepted"] += int(ok)

    for i in range(args.models):
        op = ops[i % len(ops)]
        seed_options = SEED_OPTIONS[op][int(rng.integers(len(SEED_OPTIONS[op])))]
        mode = i % 4
        if mode == 0:
            options: bytes | None = mutate(rng, flex(seed_options), pool)
        elif mode == 1:
            options = flex(mutate_dict(rng, seed_options))
        elif mode == 2:
            options = flex(seed_options)
        else:
            options = None if rng.random() < 0.2 else mutate(rng, flex(seed_options), pool)
        model = build_model(rng, op, options, mutate_tensors=mode >= 2)
        outcome = run_model(model, rng)
        tally[outcome] = tally.get(outcome, 0) + 1
        tally["models"] = tally.get("models", 0) + 1
    print(json.dumps(tally))
    return 0


if __name__ == "__main__":
    sys.exit(main())
