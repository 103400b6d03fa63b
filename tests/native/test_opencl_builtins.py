"""Builtin-op fast paths of the OpenCL backend (PoCL in CI) vs float64 numpy: two-stage reductions (few outputs
over long rows), the one-read online softmax (with -inf masks), and the collapsed / float4 broadcasting math."""
from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from harness import assert_close, run
from tflite_builtin import BuiltinGraph

OP = S.BuiltinOperator


@pytest.mark.parametrize(
    "code,shape,axes,keep,ref",
    [
        (OP.MEAN, (1, 32, 2, 20000), [2, 3], True, lambda x: x.mean(axis=(2, 3), keepdims=True)),  # 10 chunks
        (OP.MEAN, (3, 9000), [-1], False, lambda x: x.mean(axis=-1)),                              # partial chunk
        (OP.SUM, (4, 50000), [1], False, lambda x: x.sum(axis=1)),
        (OP.REDUCE_MAX, (2, 3, 12289), [2], True, lambda x: x.max(axis=2, keepdims=True)),
        (OP.MEAN, (1, 64, 320), [2], False, lambda x: x.mean(axis=2)),  # short rows: one stage
    ],
)
def test_reductions_match_numpy(rng, code, shape, axes, keep, ref):
    x = (rng.standard_normal(shape) * 2.0 + 3.0).astype(np.float32)
    expected = ref(x.astype(np.float64)).astype(np.float32)
    g = BuiltinGraph()
    g.output(g.reduce(code, g.input("x", shape), axes, expected.shape, keep, "y"))
    result = run(g.build(), {"x": x}, backend="opencl")
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert_close(result.outputs["y"], expected, rtol=1e-5)


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_softmax_with_masked_entries(rng, beta):
    x = (4.0 * rng.standard_normal((6, 300))).astype(np.float32)
    x[1, 150:] = -np.inf   # half of a row masked (CLIP's causal mask is an ADD of -inf)
    x[2, 1:] = -np.inf     # one live entry
    x[3, :299] = -np.inf
    g = BuiltinGraph()
    g.output(g.softmax(g.input("x", x.shape), x.shape, beta, "y"))
    result = run(g.build(), {"x": x}, backend="opencl")
    z = beta * x.astype(np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    expected = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    assert np.isfinite(result.outputs["y"]).all()
    assert result.outputs["y"][2, 0] == 1.0 and result.outputs["y"][3, 299] == 1.0
    assert_close(result.outputs["y"], expected, rtol=1e-5)


@pytest.mark.parametrize(
    "code,a_shape,b_shape",
    [
        (OP.ADD, (2, 8, 8, 32), (32,)),          # bias: float4 a, float4 b along channels
        (OP.MUL, (2, 8, 8, 32), (2, 1, 1, 32)),  # per-sample scale: H, W collapse into one dim
        (OP.SUB, (2, 8, 8, 32), (2, 8, 8, 1)),   # b broadcast along the inner dim: scalar per float4
        (OP.ADD, (1, 16, 64), (16, 64)),         # same shape after the leading 1: one flat dim
        (OP.MUL, (4, 16), ()),                   # scalar
        (OP.ADD, (3, 5, 7), (7,)),               # inner 7: the scalar kernel
        (OP.SUB, (1,), (3, 1, 6)),               # a broadcast everywhere, output inner 6
    ],
)
def test_broadcasting_binary_matches_numpy(rng, code, a_shape, b_shape):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    fn = {OP.ADD: np.add, OP.MUL: np.multiply, OP.SUB: np.subtract}[code]
    expected = fn(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    g = BuiltinGraph()
    g.output(g.binary(code, g.input("a", a_shape), g.input("b", b_shape), expected.shape, "y"))
    result = run(g.build(), {"a": a, "b": b}, backend="opencl")
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert_close(result.outputs["y"], expected, rtol=1e-6)


@pytest.mark.parametrize(
    "shape,perm",
    [
        ((1, 45, 37, 12), (0, 3, 1, 2)),  # NHWC -> NCHW: tiled [1, HW, C] -> [1, C, HW], partial tiles
        ((2, 12, 9, 33), (0, 2, 3, 1)),   # NCHW -> NHWC, batch 2
        ((1, 70, 3, 40), (0, 2, 1, 3)),   # heads split: inner D contiguous -> 16-byte copies
        ((1, 70, 3, 40), (0, 2, 3, 1)),   # K^T per head: tiled with a batch stride (sb = D, ld = H*D)
        ((2, 3, 5, 7), (3, 1, 0, 2)),     # a general permutation: the generic copy
    ],
)
def test_transpose_paths_match_numpy(rng, shape, perm):
    x = rng.standard_normal(shape).astype(np.float32)
    expected = np.transpose(x, perm)
    g = BuiltinGraph()
    g.output(g.transpose(g.input("x", shape), perm, expected.shape, "y"))
    result = run(g.build(), {"x": x}, backend="opencl")
    assert result.stats["claimed_nodes"] == 1
    np.testing.assert_array_equal(result.outputs["y"], expected)


def test_slice_concat_pad_resize_match_numpy(rng):
    # GEGLU-style halves (aligned 16-byte copies), an unaligned slice (begin 3: scalar copies), a channel
    # concat, H/W zero padding (inner channels stay 16-byte runs) and a 2x nearest upsample (C % 4 == 0 and not).
    x = rng.standard_normal((1, 6, 5, 16)).astype(np.float32)
    w = rng.standard_normal((1, 6, 5, 3)).astype(np.float32)
    g = BuiltinGraph()
    xi, wi = g.input("x", x.shape), g.input("w", w.shape)
    lo = g.slice(xi, [0, 0, 0, 0], [1, 6, 5, 8], "lo")
    hi = g.slice(xi, [0, 0, 0, 8], [1, 6, 5, 8], "hi")
    odd = g.slice(xi, [0, 1, 0, 3], [1, 4, 5, 9], "odd")
    cat = g.concat([hi, lo, wi], 3, [1, 6, 5, 19], "cat")
    padded = g.pad(hi, [[0, 0], [1, 2], [2, 0], [0, 0]], [1, 9, 7, 8], "padded")
    up = g.resize_nearest(lo, [12, 10], [1, 12, 10, 8], "up")
    up3 = g.resize_nearest(wi, [12, 10], [1, 12, 10, 3], "up3")
    for t in (odd, cat, padded, up, up3):
        g.output(t)
    result = run(g.build(), {"x": x, "w": w}, backend="opencl")
    assert result.stats["partitions"] == 1 and result.stats["declined_nodes"] == 0
    out = result.outputs
    np.testing.assert_array_equal(out["odd"], x[:, 1:5, :, 3:12])
    np.testing.assert_array_equal(out["cat"], np.concatenate([x[..., 8:], x[..., :8], w], axis=3))
    np.testing.assert_array_equal(out["padded"], np.pad(x[..., 8:], [(0, 0), (1, 2), (2, 0), (0, 0)]))
    np.testing.assert_array_equal(out["up"], x[..., :8].repeat(2, axis=1).repeat(2, axis=2))
    np.testing.assert_array_equal(out["up3"], w.repeat(2, axis=1).repeat(2, axis=2))


def _rel_err(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(actual.astype(np.float64) - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_half_activation_storage_builtins_match_numpy(rng, backend):
    """activations_fp16: every tensor inside the partition is stored as half (ACT_* kernels, the layout kernels'
    _act twins); one partition of broadcasting math (float4 and scalar paths), a tiled transpose, unaligned and
    aligned copies, concat / pad / nearest resize, softmax and one- and two-stage reductions stays within 3e-3 of
    float64 numpy (max abs error / max abs reference)."""
    x = rng.standard_normal((1, 6, 5, 16)).astype(np.float32)
    b = rng.standard_normal((16,)).astype(np.float32)
    c = rng.standard_normal((1, 6, 5, 1)).astype(np.float32)
    w = rng.standard_normal((1, 6, 5, 3)).astype(np.float32)
    z = (rng.standard_normal((2, 20000)) + 3.0).astype(np.float32)
    g = BuiltinGraph()
    xi, bi, ci, wi, zi = (g.input(n, v.shape) for n, v in (("x", x), ("b", b), ("c", c), ("w", w), ("z", z)))
    s = g.binary(OP.ADD, xi, bi, x.shape, "s")  # float4 a and b
    t = g.binary(OP.MUL, s, ci, x.shape, "t")   # b broadcast along the inner dim
    lo = g.slice(t, [0, 0, 0, 0], [1, 6, 5, 8], "lo")
    hi = g.slice(t, [0, 0, 0, 8], [1, 6, 5, 8], "hi")
    outs = [
        g.slice(t, [0, 1, 0, 3], [1, 4, 5, 9], "odd"),
        g.concat([hi, lo, wi], 3, [1, 6, 5, 19], "cat"),
        g.pad(hi, [[0, 0], [1, 2], [2, 0], [0, 0]], [1, 9, 7, 8], "padded"),
        g.resize_nearest(lo, [12, 10], [1, 12, 10, 8], "up"),
        g.resize_nearest(wi, [12, 10], [1, 12, 10, 3], "up3"),
        g.transpose(t, (0, 3, 1, 2), (1, 16, 6, 5), "tr"),
        g.transpose(t, (3, 1, 0, 2), (16, 6, 1, 5), "perm"),
        g.softmax(t, x.shape, 1.0, "sm"),
        g.reduce(OP.MEAN, t, [1, 2], (1, 1, 1, 16), True, "mean"),
        g.reduce(OP.SUM, zi, [1], (2,), False, "zsum"),
    ]
    for o in outs:
        g.output(o)
    result = run(g.build(), {"x": x, "b": b, "c": c, "w": w, "z": z}, backend=backend, activations_fp16=True)
    assert result.stats["partitions"] == 1 and result.stats["declined_nodes"] == 0
    t64 = (x.astype(np.float64) + b) * c
    lo64, hi64 = t64[..., :8], t64[..., 8:]
    e = np.exp(t64 - t64.max(axis=-1, keepdims=True))
    expected = {
        "odd": t64[:, 1:5, :, 3:12], "cat": np.concatenate([hi64, lo64, w], axis=3),
        "padded": np.pad(hi64, [(0, 0), (1, 2), (2, 0), (0, 0)]),
        "up": lo64.repeat(2, axis=1).repeat(2, axis=2), "up3": w.astype(np.float64).repeat(2, axis=1).repeat(2, axis=2),
        "tr": np.transpose(t64, (0, 3, 1, 2)), "perm": np.transpose(t64, (3, 1, 0, 2)),
        "sm": e / e.sum(axis=-1, keepdims=True), "mean": t64.mean(axis=(1, 2), keepdims=True),
        "zsum": z.astype(np.float64).sum(axis=1),
    }
    errors = {k: _rel_err(result.outputs[k], v) for k, v in expected.items()}
    assert max(errors.values()) <= 3e-3, errors
    # a copy moves halves unchanged: the resized input is exactly w rounded to half
    np.testing.assert_array_equal(result.outputs["up3"], w.astype(np.float16).astype(np.float32).repeat(2, 1).repeat(2, 2))
