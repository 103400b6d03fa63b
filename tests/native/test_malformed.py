"""Malformed Sd* nodes are declined with a one-line reason (and the runtime then reports the unresolved op).

Also pins the contract that the C++ attrs parsers accept exactly what ``OpSpec.decode`` accepts.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness import make_interpreter
from sdconvert.ops import REGISTRY, OpAttrError
from sdlite import native
from sdlite.model_check import check_model
from tflite_models import GraphBuilder, attention_model, flex, gelu_model, group_norm_model

ATT = {"heads": 2, "head_dim": 4, "scale": 0.5}


def _declined_reason(model: bytes) -> str:
    """Apply the delegate, expect exactly one declined node and the runtime's unresolved-op failure; the model
    validator (sdlite.model_check, what inspect / bench / generate run first) must give the very same reason."""
    delegate = native.load(num_threads=1, log_level="silent")
    interpreter = make_interpreter(model, delegate)
    with pytest.raises(RuntimeError, match="unresolved custom op"):
        interpreter.allocate_tensors()
    stats = native.stats(delegate)
    assert stats["claimed_nodes"] == 0 and stats["declined_nodes"] == 1, stats
    reason = stats["declined"][0]["reason"]
    assert [f.error for f in check_model(content=model).fused] == [reason]
    return reason


@pytest.mark.parametrize(
    "options, reason",
    [
        (None, "SdAttention: malformed flexbuffer options: missing or too short (0 bytes)"),
        (b"\x01\x02\x03\x04", "SdAttention: malformed flexbuffer options: bad root width"),
        (b"\xff" * 64, "SdAttention: malformed flexbuffer options: bad root width"),
        (flex([1, 2, 3]), "SdAttention: malformed flexbuffer options: root is not a map"),
        (flex({"heads": 2}), "SdAttention: missing required attribute 'head_dim'"),
        (flex({**ATT, "heads": "two"}), "SdAttention: attribute 'heads' must be an int, got string"),
        (flex({**ATT, "heads": 1.5}), "SdAttention: attribute 'heads' must be an int, got float"),
        (flex({**ATT, "heads": 0}), "SdAttention: attribute 'heads' = 0 is out of range [1, 2147483647]"),
        (flex({**ATT, "scale": -1.0}), "SdAttention: attribute 'scale' must be > 0"),
        (flex({**ATT, "scale": math.nan}), "SdAttention: attribute 'scale' must be finite"),
        (flex({**ATT, "causal": 2}), "SdAttention: attribute 'causal' must be a bool, got int"),
        (flex({**ATT, "causal": "yes"}), "SdAttention: attribute 'causal' must be a bool, got string"),
        (flex({**ATT, "variant": "fast"}),
         "SdAttention: attribute 'variant' = 'fast' is not one of partial_softmax|flash"),
        (flex({**ATT, "variant": [1]}), "SdAttention: attribute 'variant' must be a string, got container"),
        (flex({**ATT, "heads": 3}), "SdAttention: heads*head_dim = 12 but Q/K/V last dims are 8/8/8"),
    ],
)
def test_bad_attention_options(options, reason):
    assert _declined_reason(attention_model(1, 4, 4, 2, 4, options)) == reason


def _attention_graph(q_shape, k_shape, v_shape, o_shape, q_dtype=np.float32, n_inputs=3) -> bytes:
    g = GraphBuilder()
    q = g.input("q", q_shape, q_dtype)
    k = g.input("k", k_shape)
    v = g.input("v", v_shape)
    o = g.tensor("o", o_shape)
    g.custom("SdAttention", [q, k, v][:n_inputs], [o], flex(ATT))
    g.output(o)
    return g.build()


@pytest.mark.parametrize(
    "shapes, kwargs, reason",
    [
        (([4, 8], [1, 4, 8], [1, 4, 8], [4, 8]), {}, "SdAttention: Q must be rank 3 [N,S,H*D], got [4,8]"),
        (([1, 4, 8], [1, 5, 8], [1, 6, 8], [1, 4, 8]), {}, "SdAttention: K and V sequence lengths differ"),
        (([2, 4, 8], [1, 5, 8], [1, 5, 8], [2, 4, 8]), {}, "SdAttention: Q, K, V batch sizes differ"),
        (([1, 4, 8], [1, 5, 8], [1, 5, 8], [1, 5, 8]), {},
         "SdAttention: output shape [1,5,8] does not match the inferred [1,4,8]"),
        (([1, 4, 8], [1, 4, 8], [1, 4, 8], [1, 4, 8]), {"q_dtype": np.int32}, "SdAttention: Q must be float32"),
        (([1, 4, 8], [1, 4, 8], [1, 4, 8], [1, 4, 8]), {"n_inputs": 2},
         "SdAttention: expected 3 inputs and 1 output, got 2 and 1"),
    ],
)
def test_bad_attention_tensors(shapes, kwargs, reason):
    assert _declined_reason(_attention_graph(*shapes, **kwargs)) == reason


GN = {"groups": 4, "channel_axis": 1}


@pytest.mark.parametrize(
    "shape, c, options, reason",
    [
        ((1, 16, 4, 4), 8, flex(GN), "SdGroupNorm: gamma must be [16], got [8]"),
        ((1, 18, 4, 4), 18, flex(GN), "SdGroupNorm: channels (18) not divisible by groups (4)"),
        ((1, 4, 16), 16, flex({"groups": 4, "channel_axis": 3}),
         "SdGroupNorm: channel_axis 3 is invalid for rank 3 (axis 0 is the batch)"),
        ((1, 16, 4, 4), 16, flex({"groups": 4, "channel_axis": 0}),
         "SdGroupNorm: attribute 'channel_axis' must be -1, 1, 2 or 3, got 0"),
        ((16, 4), 16, flex({"groups": 4, "channel_axis": -1}), "SdGroupNorm: x must be rank 3 or 4, got [16,4]"),
        ((1, 16, 4, 4), 16, flex({**GN, "eps": -1e-5}), "SdGroupNorm: attribute 'eps' must be >= 0"),
        ((1, 16, 4, 4), 16, flex({**GN, "activation": "gelu"}),
         "SdGroupNorm: attribute 'activation' = 'gelu' is not one of none|silu"),
        ((1, 16, 4, 4), 16, flex({"eps": 1e-5}), "SdGroupNorm: missing required attribute 'groups'"),
    ],
)
def test_bad_group_norm(shape, c, options, reason):
    gamma = np.ones(c, np.float32)
    assert _declined_reason(group_norm_model(shape, gamma, gamma, options)) == reason


def test_bad_gelu_input_type():
    g = GraphBuilder()
    x = g.input("x", [4], np.int32)
    y = g.tensor("y", [4])
    g.custom("SdGelu", [x], [y], flex({"approximate": "none"}))
    g.output(y)
    assert _declined_reason(g.build()) == "SdGelu: input must be float32"


def test_unknown_sd_op_is_declined_and_foreign_custom_ops_are_ignored():
    for name, declined in (("SdFoo", 1), ("MyCustomOp", 0)):
        g = GraphBuilder()
        x = g.input("x", [4])
        y = g.tensor("y", [4])
        g.custom(name, [x], [y], flex({}))
        g.output(y)
        delegate = native.load(num_threads=1, log_level="silent")
        with pytest.raises(RuntimeError, match=f"unresolved custom op: {name}"):
            make_interpreter(g.build(), delegate).allocate_tensors()
        stats = native.stats(delegate)
        assert stats["declined_nodes"] == declined and stats["other_nodes"] == 1 - declined
        if declined:
            assert stats["declined"][0]["reason"] == "unknown Sd* custom op"


# ---- parser parity with sdconvert.ops (OpSpec.decode) ---------------------------------------------------------

PARITY_CASES = {
    "SdAttention": [
        ATT,
        {**ATT, "causal": True, "variant": "flash"},
        {**ATT, "causal": 1},                 # bool from int 0/1
        {**ATT, "causal": 0, "scale": 1},     # float from int
        {**ATT, "variant": b"flash"},         # string from blob
        {**ATT, "extra": "ignored"},          # unknown keys are ignored on both sides
        {**ATT, "causal": 2},
        {**ATT, "causal": None},
        {**ATT, "heads": True},
        {**ATT, "heads": 2.0},
        {**ATT, "scale": 0.0},
        {**ATT, "scale": math.inf},
        {**ATT, "variant": "Flash"},
        {"heads": 2, "head_dim": 4},
        {},
    ],
    "SdGelu": [
        {},
        {"approximate": "tanh"},
        {"approximate": "quick"},
        {"approximate": "erf"},
        {"approximate": 1},
        {"approximate": None},
    ],
    "SdGroupNorm": [
        {"groups": 32},
        {"groups": 32, "eps": 1e-6, "activation": "silu", "channel_axis": 1},
        {"groups": 32, "eps": 0},
        {"groups": 32, "channel_axis": 3},
        {"groups": 32, "channel_axis": 0},
        {"groups": 32, "channel_axis": -2},
        {"groups": 32, "channel_axis": 4},
        {"groups": 0},
        {"groups": 32, "eps": -1.0},
        {"groups": 32, "eps": math.nan},
        {"groups": 32, "activation": "relu"},
        {"groups": "32"},
        {"eps": 1e-5},
    ],
}


@pytest.mark.parametrize("op, options", [(op, o) for op, cases in PARITY_CASES.items() for o in cases])
def test_native_parser_accepts_exactly_what_python_decode_accepts(op, options):
    blob = flex(options)
    try:
        REGISTRY[op].decode(blob)
        python_ok = True
    except OpAttrError:
        python_ok = False
    native_ok, message = native.check_op_options(op, blob)
    assert native_ok == python_ok, message
    assert (message == "") == native_ok
    if not native_ok:
        assert message.startswith(f"{op}: ") and "\n" not in message


def test_fused_op_version_is_judged_from_the_file():
    """The delegate never sees a custom op's opcode version (TFLite's placeholder registration says 1): it claims an
    SdGelu of version 2 on its options and shapes alone. The model validator reads the version from the file and
    refuses it with the delegate's own CheckOpHeader message (custom_ops/README.md, Known limits)."""
    g = GraphBuilder()
    x = g.input("x", [4])
    y = g.tensor("y", [4])
    g.custom("SdGelu", [x], [y], flex({"approximate": "none"}), version=2)
    g.output(y)
    model = g.build()
    delegate = native.load(num_threads=1, log_level="silent")
    make_interpreter(model, delegate).allocate_tensors()
    assert native.stats(delegate)["claimed_nodes"] == 1
    assert [f.error for f in check_model(content=model).fused] == ["SdGelu: version 2 is not supported (expected 1)"]
    assert native.check_node("SdGelu", 1, flex({"approximate": "none"}), [native.NodeTensor(0, 0, (4,))],
                             [native.NodeTensor(1, 0, (4,))]) == (True, "")
