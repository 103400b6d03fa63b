"""GL backend (OpenGL ES 3.1 compute on Mesa llvmpipe in CI): the Sd* op cases every GPU backend runs
(gpu_cases.py), plus what is specific to GLSL and to EGL: the functions GLSL lacks or defines loosely (erf,
sin/cos at large arguments, tanh overflow, pow of negative bases), fp16 words, dispatches split beyond
GL_MAX_COMPUTE_WORK_GROUP_COUNT, the profile's timing method, threads, and the no-EGL error."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S
from ai_edge_litert.interpreter import load_delegate

import gpu_cases
from harness import assert_close, make_interpreter, run
from sdconvert.ops import gelu as G
from sdlite import native
from tflite_models import GraphBuilder, gelu_model

BACKEND = "gl"


@pytest.mark.parametrize("variant", gpu_cases.ATTENTION_VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,sq,sk,heads,head_dim", gpu_cases.ATTENTION_SHAPES)
def test_attention_matches_reference(rng, variant, causal, n, sq, sk, heads, head_dim):
    gpu_cases.check_attention(BACKEND, rng, variant, causal, n, sq, sk, heads, head_dim)


@pytest.mark.parametrize("storage", ["float32", "half"])
@pytest.mark.parametrize("mode", gpu_cases.GELU_MODES)
def test_gelu_matches_reference(rng, mode, storage):
    gpu_cases.check_gelu(BACKEND, rng, mode, half=storage == "half")


@pytest.mark.parametrize("shape,groups,axis,act", gpu_cases.GROUP_NORM_CASES)
def test_group_norm_matches_reference(rng, shape, groups, axis, act):
    gpu_cases.check_group_norm(BACKEND, rng, shape, groups, axis, act)


def test_version_lists_gl():
    assert "gl" in native.version()


def test_gelu_erf_is_relatively_exact_in_the_tails():
    """GLSL has no erf: ours must hold relative accuracy where 1 + erf(x) is tiny (x << 0) and near 0."""
    from math import erfc, sqrt

    x = np.array([-9.0, -6.0, -4.0, -2.5, -1.0, -1e-3, -1e-6, 0.0, 1e-6, 1e-3, 0.3, 0.71, 2.0, 5.0], np.float32)
    want = np.array([0.5 * v * erfc(-v / sqrt(2.0)) for v in x.astype(np.float64)])  # 1 + erf(u) = erfc(-u)
    got = run(gelu_model(x.shape, G.SPEC.encode(G.GeluAttrs(approximate="none"))), {"x": x},
              backend=BACKEND).outputs["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-37)  # fp32 exp(-u^2) limits the far tail


class _OpGraph(GraphBuilder):
    """GraphBuilder plus any builtin op and float16 tensors (what the GL-specific cases need)."""

    def _add_tensor(self, name: str, shape: Sequence[int], dtype, buffer: int = 0) -> int:
        if np.dtype(dtype) != np.float16:
            return super()._add_tensor(name, shape, dtype, buffer)
        t = S.TensorT()
        t.name, t.shape, t.type, t.buffer = name, [int(d) for d in shape], S.TensorType.FLOAT16, buffer
        self._tensors.append(t)
        return len(self._tensors) - 1

    def builtin(self, code: int, inputs: Sequence[int], outputs: Sequence[int], options_type: int = 0,
                options=None) -> None:
        op = S.OperatorT()
        op.opcodeIndex = self._opcode(code, None, 1)
        op.inputs, op.outputs = list(inputs), list(outputs)
        op.builtinOptionsType, op.builtinOptions = options_type, options
        self._operators.append(op)


def _unary_model(code: int, shape: Sequence[int], in_dtype=np.float32, options_type: int = 0, options=None) -> bytes:
    g = _OpGraph()
    x = g.input("x", shape, in_dtype)
    y = g.tensor("y", shape)
    g.builtin(code, [x], [y], options_type, options)
    g.output(y)
    return g.build()


def _run_fully_delegated(model: bytes, inputs: dict[str, np.ndarray], **options) -> np.ndarray:
    result = run(model, inputs, backend=BACKEND, **options)
    assert result.stats["claimed_nodes"] >= 1 and result.stats["declined_nodes"] == 0
    assert result.stats["partitions"] == 1
    return result.outputs["y"]


@pytest.mark.parametrize("op,fn", [(S.BuiltinOperator.SIN, np.sin), (S.BuiltinOperator.COS, np.cos)])
def test_sin_cos_hold_absolute_accuracy_at_large_arguments(rng, op, fn):
    """Timestep embeddings take sin/cos of t * f up to ~1000 rad: the range reduction must stay exact."""
    near = np.concatenate([rng.uniform(-1000.0, 1000.0, 4000), rng.uniform(-4.0, 4.0, 1000),
                           np.array([0.0, np.pi / 2, -np.pi, 999.75])]).astype(np.float32)
    far = np.concatenate([rng.uniform(-65536.0, 65536.0, 1000), np.array([12345.0, -50000.5])]).astype(np.float32)
    x = np.concatenate([near, far])
    got = _run_fully_delegated(_unary_model(op, x.shape), {"x": x})
    want = fn(x.astype(np.float64))
    np.testing.assert_allclose(got[:near.size], want[:near.size], rtol=0, atol=2e-7)
    np.testing.assert_allclose(got[near.size:], want[near.size:], rtol=0, atol=2e-6)


def test_tanh_and_logistic_saturate_without_nan_and_keep_small_values_relative():
    x = np.array([-1e4, -88.0, -30.0, -15.5, -3.0, -0.54, -1e-3, -1e-6, 0.0, 1e-6, 1e-3, 0.2, 0.56, 7.0, 30.0, 1e4],
                 np.float32)
    got = _run_fully_delegated(_unary_model(S.BuiltinOperator.TANH, x.shape), {"x": x})
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64)), rtol=2e-6, atol=1e-37)
    got = _run_fully_delegated(_unary_model(S.BuiltinOperator.LOGISTIC, x.shape), {"x": x})
    with np.errstate(over="ignore"):
        want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-37)


def test_pow_follows_c_semantics_for_negative_bases_and_zero():
    a = np.array([-2.0, -1.5, -3.0, 0.0, 0.0, 2.5, 4.0, -0.5], np.float32)
    b = np.array([3.0, 2.0, -1.0, 2.0, 0.0, 0.37, 0.5, 4.0], np.float32)
    g = _OpGraph()
    ia, ib = g.input("a", a.shape), g.input("b", b.shape)
    y = g.tensor("y", a.shape)
    g.builtin(S.BuiltinOperator.POW, [ia, ib], [y], S.BuiltinOptions.PowOptions, S.PowOptionsT())
    g.output(y)
    got = _run_fully_delegated(g.build(), {"a": a, "b": b})
    np.testing.assert_allclose(got, np.power(a.astype(np.float64), b.astype(np.float64)), rtol=2e-6)


@pytest.mark.parametrize("shape", [(3,), (5, 7)])
def test_fp16_dequantize_reads_both_halves_of_each_word(rng, shape):
    """fp16 activations are read as 32-bit words on GL (unpackHalf2x16): odd element counts and odd
    indices take the high half, and the last, partial word must not read out of bounds."""
    x = (rng.standard_normal(shape) * 100.0).astype(np.float16)
    x.flat[0] = np.float16(6.1e-5)  # subnormal-adjacent
    got = _run_fully_delegated(_unary_model(S.BuiltinOperator.DEQUANTIZE, shape, np.float16), {"x": x})
    np.testing.assert_array_equal(got, x.astype(np.float32))


def test_dispatch_split_beyond_the_work_group_count_limit(rng):
    """llvmpipe allows 65535 groups per dimension: a 1-D launch of 4.2M items (65625 groups of 64) and a
    softmax of 70000 rows (one group per row) must be split into several dispatches with a group base."""
    x = rng.standard_normal(4_200_000).astype(np.float32)
    got = _run_fully_delegated(_unary_model(S.BuiltinOperator.NEG, x.shape), {"x": x})
    np.testing.assert_array_equal(got, -x)

    rows = rng.standard_normal((70_000, 3)).astype(np.float32)
    options = S.SoftmaxOptionsT()
    options.beta = 1.0
    got = _run_fully_delegated(
        _unary_model(S.BuiltinOperator.SOFTMAX, rows.shape, np.float32, S.BuiltinOptions.SoftmaxOptions, options),
        {"x": rows})
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    assert_close(got, (e / e.sum(axis=1, keepdims=True)).astype(np.float32), rtol=1e-5)


def test_chain_of_dependent_broadcast_reductions(rng):
    """Eight layer norms in a row, unfused (MEAN, SUB, MUL, MEAN, ADD, RSQRT, MUL, ADD): every broadcast
    operand is the previous dispatch's output, and the arena reuses bytes between layers, so a missing or
    too narrow barrier between dependent dispatches (or a cache that outlives one) shows up as stale
    statistics. llvmpipe runs dispatches in order anyway; this is for drivers that overlap them."""
    rows, cols, layers = 64, 4096, 8
    x = (rng.standard_normal((1, rows, cols)) * 3.0 + 5.0).astype(np.float32)
    shifts = [rng.standard_normal(cols).astype(np.float32) for _ in range(layers)]
    g = _OpGraph()
    t = g.input("x", x.shape)
    axes = g.const("axes", np.array([2], np.int32))
    eps = g.const("eps", np.array([1e-5], np.float32))

    def op(code, ins, shape, options_type=0, options=None):
        out = g.tensor(f"t{len(g._tensors)}", shape)
        g.builtin(code, ins, [out], options_type, options)
        return out

    def mean(v):
        o = S.ReducerOptionsT()
        o.keepDims = True
        return op(S.BuiltinOperator.MEAN, [v, axes], (1, rows, 1), S.BuiltinOptions.ReducerOptions, o)

    full = x.shape
    want = x.astype(np.float64)
    for layer in range(layers):
        d = op(S.BuiltinOperator.SUB, [t, mean(t)], full, S.BuiltinOptions.SubOptions, S.SubOptionsT())
        var = mean(op(S.BuiltinOperator.MUL, [d, d], full, S.BuiltinOptions.MulOptions, S.MulOptionsT()))
        r = op(S.BuiltinOperator.RSQRT, [op(S.BuiltinOperator.ADD, [var, eps], (1, rows, 1), S.BuiltinOptions.AddOptions,
                                           S.AddOptionsT())], (1, rows, 1))
        n = op(S.BuiltinOperator.MUL, [d, r], full, S.BuiltinOptions.MulOptions, S.MulOptionsT())
        t = op(S.BuiltinOperator.ADD, [n, g.const(f"shift{layer}", shifts[layer])], full, S.BuiltinOptions.AddOptions,
               S.AddOptionsT())
        dv = want - want.mean(axis=2, keepdims=True)
        want = dv / np.sqrt((dv * dv).mean(axis=2, keepdims=True) + 1e-5) + shifts[layer]
    g._tensors[t].name = "y"
    g.output(t)
    result = run(g.build(), {"x": x}, backend=BACKEND)
    assert result.stats["claimed_nodes"] == 8 * layers and result.stats["partitions"] == 1
    assert_close(result.outputs["y"], want.astype(np.float32), rtol=1e-4)


def test_one_delegate_serves_interpreters_one_after_another(rng):
    """Programs, binding and uniform caches outlive a graph: each new interpreter on the same delegate (new
    buffers, other shapes, other GELU variants of the same kernel) must still bind and set everything."""
    import gc

    delegate = native.load(backend=BACKEND)
    for round_ in range(3):
        attrs = G.GeluAttrs(approximate=("none", "tanh", "quick")[round_])
        x = rng.standard_normal((2, 300 + round_)).astype(np.float32)
        runner = make_interpreter(gelu_model(x.shape, G.SPEC.encode(attrs)), delegate).get_signature_runner(
            "serving_default")
        assert_close(runner(x=x)["y"], G.reference([x], attrs), rtol=1e-5)
        del runner
        gc.collect()
    assert native.stats(delegate)["graphs"] == 3


def test_profile_json_names_the_gl_timing_method(rng, tmp_path):
    data = gpu_cases.profile_group_norm(BACKEND, rng, tmp_path / "profile.json", invocations=2)
    # llvmpipe's timer queries measure nothing (dispatches run lazily), so it gets glFinish + host clock;
    # hardware drivers (NVIDIA) use GL_EXT_disjoint_timer_query.
    software = data["device"].startswith("llvmpipe")
    assert data["method"] == ("gl_finish_host_clock" if software else "gl_timer_query")
    assert data["nodes"][0]["ms"] > 0.0


def test_prepare_and_invoke_on_different_threads(rng):
    """The context follows the calling thread: built on this thread, invoked on two others, then here."""
    attrs = G.GeluAttrs(approximate="tanh")
    x = rng.standard_normal((4, 256)).astype(np.float32)
    want = G.reference([x], attrs)
    runners = [make_interpreter(gelu_model(x.shape, G.SPEC.encode(attrs)), native.load(backend=BACKEND))
               .get_signature_runner("serving_default") for _ in range(2)]
    results: list = [None, None]

    def work(i: int) -> None:
        results[i] = [runners[i](x=x)["y"] for _ in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for outs in results:
        assert outs is not None and len(outs) == 3
        for y in outs:
            assert_close(y, want, rtol=1e-5)
    assert_close(runners[0](x=x)["y"], want, rtol=1e-5)


def test_no_egl_driver_is_a_one_line_error(delegate_lib):
    """With no EGL vendor library (glvnd finds no driver) asking for gl fails at delegate creation."""
    code = ("from sdlite import native\n"
            "try:\n    native.load(backend='gl')\nexcept native.NativeDelegateError as e:\n    print(e)\n")
    env = dict(os.environ, __EGL_VENDOR_LIBRARY_FILENAMES="/nonexistent/egl_vendor.json",
               SDLITE_DELEGATE_PATH=str(delegate_lib))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in out.stdout.splitlines() if line]
    assert len(lines) == 1, out.stdout + out.stderr
    assert "gl: no EGL display with an OpenGL ES 3.1 context" in lines[0]
    assert "install libegl1 libgles2" in lines[0]


_GLSL_FILES = sorted((Path(__file__).resolve().parents[2] / "custom_ops" / "backends" / "gl" / "shaders").glob("*.glsl"))
_SECTION = re.compile(r"^//== (?:kernel|fragment) (\w+)$", re.M)
from kernel_dialect import glsl_kernels  # noqa: E402
_WRITE_OP = r"\s*(?:=(?!=)|\+=|-=|\*=|/=)"


def _shared_slot_violations(section: str) -> list[str]:
    """Writes to a shared array after a constant-index read of it (`mx = scratch[0]; ... scratch[lid] = s`)."""
    found = []
    names = re.findall(r"^\s*shared\s+\w+\s+(\w+)\s*\[", section, re.M)
    section = re.sub(r"^\s*shared\s.*$", "", section, flags=re.M)  # declarations: `shared float s[64];` is no read
    for name in names:
        reads = [m for m in re.finditer(rf"\b{name}\s*\[\s*\d+\s*\]", section)
                 if not re.match(_WRITE_OP, section[m.end():])]
        if reads and re.search(rf"\b{name}\s*\[[^\]]*\]{_WRITE_OP}", section[reads[0].end():]):
            found.append(name)
    return found


def test_shared_broadcast_slots_are_never_rewritten():
    """Issue #7 (gpu/dialect/README.md, "shared broadcast slots"): NVIDIA's GLSL compiler re-loads a value read
    from shared memory past barrier() at its later uses, so a slot every invocation reads (a reduction's
    result) must never be written again; softmax_f32 reused one array for its max and its sum and
    normalised whole rows by a wrong sum on the H200. llvmpipe never re-loads, so the rule is checked
    on the shaders the build generates from the kernel dialect (and on the GL-only shader files): no kernel may
    write a shared array after reading it at a constant index."""
    bad = []
    generated = glsl_kernels()
    assert len(generated) >= 19
    for name, (path, body) in generated.items():
        bad += [f"{path}:{name}:{array}" for array in _shared_slot_violations(body)]
    for path in _GLSL_FILES:
        # comments dropped (section markers kept): they name slots like `smax[0]` in prose
        text = "\n".join(line if line.startswith("//== ") else line.split("//")[0]
                          for line in path.read_text().splitlines())
        parts = _SECTION.split(text)  # [common, name1, body1, name2, body2, ...]
        for name, body in zip(parts[1::2], parts[2::2]):
            bad += [f"{path.name}:{name}:{array}" for array in _shared_slot_violations(parts[0] + body)]
    assert bad == []
    # the check itself catches the issue #7 pattern
    assert _shared_slot_violations("shared float scratch[64];\nmx = scratch[0];\nSD_BARRIER();\n"
                                   "scratch[lid] = sum;\n") == ["scratch"]


@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_softmax_of_4096_wide_rows_matches_float64(rng, scale):
    """The SD attention-score shape (rows of 4096) that failed on NVIDIA (issue #7), at score scales of
    unit and random-weight size; rows must sum to 1 and two invocations must agree bit for bit."""
    x = (rng.standard_normal((1, 1, 256, 4096)) * scale).astype(np.float32)
    options = S.SoftmaxOptionsT()
    options.beta = 1.0
    model = _unary_model(S.BuiltinOperator.SOFTMAX, x.shape, np.float32, S.BuiltinOptions.SoftmaxOptions, options)
    runner = make_interpreter(model, native.load(backend=BACKEND)).get_signature_runner("serving_default")
    first = runner(x=x)["y"].copy()
    got = runner(x=x)["y"]
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    assert_close(got, (e / e.sum(axis=-1, keepdims=True)).astype(np.float32), rtol=1e-5)
    np.testing.assert_allclose(got.sum(axis=-1, dtype=np.float64), 1.0, atol=1e-5)
    np.testing.assert_array_equal(got, first)


def test_debug_knobs_dump_programs_strip_nv_pragmas_and_alias_kernels(rng, tmp_path):
    """The delegate options gl_dump_dir / gl_nv_pragmas / gl_kernel_alias (gl_device.h), the tools that localised
    issue #7 on the H200 (with a probe script since deleted: docs/benchmarks-history/)."""
    x = rng.standard_normal((4, 100)).astype(np.float32)
    options = S.SoftmaxOptionsT()
    options.beta = 1.0
    model = _unary_model(S.BuiltinOperator.SOFTMAX, x.shape, np.float32, S.BuiltinOptions.SoftmaxOptions, options)
    _run_fully_delegated(model, {"x": x}, gl_dump_dir=str(tmp_path), gl_nv_pragmas=False)
    source = (tmp_path / "softmax_f32_64x1x1.comp").read_text()
    assert source.startswith("#version 310 es\n") and "shared float ss[64];" in source
    assert "optionNV" not in source
    with pytest.raises(native.NativeDelegateError,
                       match="gl_kernel_alias: 'softmax_f32=no_such_kernel' is not <kernel>=<library kernel>"):
        native.load(backend=BACKEND, gl_kernel_alias="softmax_f32=no_such_kernel")


@pytest.mark.parametrize("key,value,message", [("gl_barrier", "some", "gl_barrier='some' must be all or minimal"),
                                               ("gl_finish_each", "yes", "gl_finish_each='yes' must be 0 or 1")])
def test_debug_knob_values_are_validated(key, value, message):
    with pytest.raises(ValueError, match=message):
        load_delegate(str(native.delegate_path()), {"backend": BACKEND, key: value})


def test_debug_knobs_finish_barrier_plain_keep_results(rng):
    """gl_finish_each / gl_barrier=minimal / gl_plain_buffers change how launches are synchronised and compiled,
    not what they compute."""
    x = rng.standard_normal((4, 100)).astype(np.float32)
    options = S.SoftmaxOptionsT()
    options.beta = 1.0
    model = _unary_model(S.BuiltinOperator.SOFTMAX, x.shape, np.float32, S.BuiltinOptions.SoftmaxOptions, options)
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    got = _run_fully_delegated(model, {"x": x}, gl_finish_each=True, gl_barrier="minimal", gl_plain_buffers=True)
    assert_close(got, (e / e.sum(axis=-1, keepdims=True)).astype(np.float32), rtol=1e-5)


def test_the_vae_head_width_attention_takes_its_head_dim_at_run_time_on_gl_only():
    """GL's attn_flash_d512 reads its head dim from its argument: with it fixed, NVIDIA's GL compiler unrolled the loop
    over its 16 chunks too (optionNV(unroll all)), 39-45 s of compiling on the VAE's first inference. OpenCL's keeps
    the constant (ops/attention/gpu.kern)."""
    from kernel_dialect import attention_source, cpp_command

    assert "int D = ((0) > 0 ? (0) : Dr);" in glsl_kernels()["attn_flash_d512"][1]
    assert "int D = ((80) > 0 ? (80) : Dr);" in glsl_kernels()["attn_flash_d80"][1]  # the other widths stay fixed
    opencl = subprocess.run([*cpp_command().split(), "-P", "-x", "c", "-"], input=attention_source(),
                            capture_output=True, text=True, check=True).stdout
    d512 = opencl[opencl.index("void attn_flash_d512("):]
    assert "const int D = ((512) > 0 ? (512) : Dr);" in d512[: d512.index("void attn_stats_d512(")]
    # and on GL its P.V loop over the 8-row V slices runs to the tile's valid keys, a run-time count (35 s -> 1.4 s of
    # compiling on NVIDIA's GL); OpenCL's to the constant tile size
    assert "for (int jc_ = 0; jc_ < (kvalid_); jc_ += (8))" in glsl_kernels()["attn_flash_d512"][1]
    assert "for (int jc_ = 0; jc_ < (64); jc_ += (8))" in d512[: d512.index("void attn_stats_d512(")]


def test_vae_head_width_attention_runs_the_float_probability_tile(rng, tmp_path):
    """The VAE decoder's attention (one 512-wide head) runs a flash kernel on GL (attn_flash_d512, or attn_flash_dyn
    where local memory is short: llvmpipe), whose probability tile `ps` is a float array there (LOCAL_FLOAT4S: each
    work-item stores one float per key into its own column, which in a vec4 array was a divergent branch per store on
    NVIDIA's GL); the result matches the reference."""
    A = gpu_cases.A
    attrs = A.AttentionAttrs(heads=1, head_dim=512, scale=512**-0.5, causal=False, variant="flash")
    q, k, v = (rng.standard_normal((1, s, 512)).astype(np.float32) for s in (200, 300, 300))
    profile = tmp_path / "profile.json"
    result = run(gpu_cases.attention_model(1, 200, 300, 1, 512, A.SPEC.encode(attrs)), {"q": q, "k": k, "v": v},
                 backend=BACKEND, profile_path=str(profile))
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    launched = [kern["name"] for n in json.loads(profile.read_text())["nodes"] for kern in n["kernels"]]
    assert len(launched) == 1 and launched[0] in ("attn_flash_d512", "attn_flash_dyn"), launched  # by local memory
    assert "shared float ps[" in glsl_kernels()[launched[0]][1]
    assert_close(result.outputs["o"], A.reference([q, k, v], attrs), rtol=1e-5)
