"""The kernel dialect's GLSL generator (custom_ops/gpu/dialect/gen_glsl.py): translations the kernel files rely on,
on small sources, and properties of the generated shaders, checked without a build or a GL driver."""
from __future__ import annotations

import importlib.util
import re
import sys
from functools import lru_cache
from types import ModuleType

import pytest

from kernel_dialect import DIALECT, cpp_command, glsl_kernels


@lru_cache(maxsize=1)
def _gen_glsl() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_glsl", DIALECT / "gen_glsl.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_glsl"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def _translate(tmp_path, source: str) -> dict[str, str]:
    """Kernel name -> its generated shader text for a dialect file with `source`."""
    gen = _gen_glsl()
    path = tmp_path / "case.kern"
    path.write_text(source)
    lines = gen.preprocess(cpp_command().split(), DIALECT / "prelude.h", [path])
    return {k.name: k.text for k in gen.translate(gen.split_items(lines))}


def test_float_table_literals_become_floats(tmp_path):
    """GLSL converts nothing implicitly, not even in an array constructor: float[3](1, 0, -2) does not compile, so the
    integer literals of a float CONSTANT_TABLE (the Winograd matrices) are written as floats."""
    text = _translate(tmp_path, """
CONSTANT_TABLE float t[4] = {1, 0, -2, 0.5f};
KERNEL void k(GLOBAL float* y, int yo) { y[yo] = t[0] + t[3]; }
""")["k"]
    assert "const float t[4] = float[4](1.0, 0.0, - 2.0, 0.5f);" in text


def test_local_array_sizes_may_multiply(tmp_path):
    """`LOCAL float chan[4 * N]` is an array whose size is a product, not a pointer."""
    text = _translate(tmp_path, """
#define N 64
KERNEL void k(GLOBAL float* y, int yo) {
  LOCAL float chan[4 * N];
  chan[get_local_id(0)] = 1.0f;
  BARRIER();
  y[yo] = chan[0];
}
""")["k"]
    assert "shared float chan[4 * 64];" in text


def test_local_pointer_is_still_refused(tmp_path):
    gen = _gen_glsl()
    with pytest.raises(gen.DialectError, match=r"LOCAL declaration 'float\* p'"):
        _translate(tmp_path, "KERNEL void k(GLOBAL float* y, int yo) { LOCAL float* p; y[yo] = 0.0f; }\n")


def _shared_bytes(shader: str) -> int:
    sizes = {"float": 4, "int": 4, "uint": 4, "vec2": 8, "vec4": 16, "ivec4": 16, "uvec4": 16}
    total = 0
    for typ, dims in re.findall(r"^shared (\w+) \w+((?:\[[^\]]+\])+);", shader, re.M):
        n = sizes[typ]
        for d in re.findall(r"\[([^\]]+)\]", dims):
            n *= int(eval(d, {"__builtins__": {}}))  # literal sizes after the preprocessor (4 * 256)
        total += n
    return total


@pytest.mark.parametrize("source", ["ops/group_norm/gpu.kern", "ops/conv2d_winograd/gpu.kern"])
def test_norm_and_winograd_shaders_fit_every_gl_es_device(source):
    """GL ES 3.1 guarantees 16 KiB of shared memory per work-group (gpu/dialect/prelude.h SD_WG_MAX_SHARED_BYTES)
    and the GL device asks for 5 storage blocks (gl_device.cc): these kernels fit both everywhere, so their planners
    need no device check beyond the work-group sizes (ops/<op>/gpu.cc)."""
    kernels = {name: body for name, (path, body) in glsl_kernels().items() if path == source}
    # Winograd: 9 input + 12 output transforms, 3 filter transforms (winograd_filter_fM, the set-up on the device)
    assert len(kernels) == (10 if "group_norm" in source else 24)
    for name, body in kernels.items():
        assert _shared_bytes(body) <= 16384, name
        assert len(set(re.findall(r"layout\(std430, binding = (\d+)\)", body))) <= 5, name
    if "group_norm" in source:  # the largest: four arrays of the two-stage partials by rows
        assert _shared_bytes(kernels["group_norm_partial_rows"]) == 256 * 16 + 1024 * 4 + 2 * 256 * 4


def test_winograd_shaders_get_constant_matrices_and_trip_counts():
    """The transforms are unrolled with constant coefficients: on OpenCL the matrices are __constant tables indexed
    with literal trip counts; the GLSL keeps that form (const arrays, literal loop bounds, `#pragma optionNV(unroll
    all)` in the runtime), so the driver folds the coefficients as the hand-written port allowed."""
    kernels = glsl_kernels()
    for m, a in ((2, 4), (4, 6), (6, 8)):
        body = kernels[f"winograd_input_f{m}_gnsilu"][1]
        assert re.search(rf"^const float wino_f{m}_bt\[{a * a}\] = float\[{a * a}\]\(", body, re.M)
        assert f"for (int k = 0; k < {a}; ++k)" in body and f"wino_f{m}_bt[i * {a} + k]" in body
        body = kernels[f"winograd_output_f{m}_sum_st"][1]
        assert re.search(rf"^const float wino_f{m}_at\[{m * a}\] = float\[{m * a}\]\(", body, re.M)
        assert f"for (int i = 0; i < {m}; ++i)" in body and f"wino_f{m}_at[j * {a} + l]" in body


def test_unaligned_half4_loads_read_the_packed_view(tmp_path):
    """LDH4 (any half offset, OpenCL's vload_half4) reads four halves through the buffer's 32-bit view."""
    text = _translate(tmp_path, "KERNEL void k(GLOBAL float* y, int yo, GLOBAL const float* h, int ho) {\n"
                                "  const float4 v = LDH4(h, ho + 1);\n"
                                "  y[yo] = v.x + v.w;\n"
                                "}\n")["k"]
    assert "readonly buffer SdBuf1_u32 { uint h_u32[]; };" in text
    assert "unpackHalf2x16(h_u32[((ho + 1) + 3) >> 1])[((ho + 1) + 3) & 1]" in text


def test_capability_switches_are_off_on_glsl(tmp_path):
    # the portable twin of a vendor-only body is what GL compiles
    text = _translate(tmp_path, """
#if SD_HAS_NV_SHFL
#define SUM2(v) ((v) + nv_shfl_xor((v), 1))
#else
#define SUM2(v) ((v) * 2.0f)
#endif
KERNEL void k(GLOBAL float* y, int yo) { y[yo] = SUM2(y[yo]); }
""")["k"]
    assert "nv_shfl_xor" not in text and "* 2.0f" in text


@pytest.mark.parametrize("act_half", [False, True])
def test_gemm_tiles_are_stored_without_vector_subscripts(act_half):
    """The tiled GEMM / conv kernels transpose A into local memory one float at a time, each work-item into a column
    of its own. In a `shared vec4` array that store needs a component chosen at run time (`As4[i >> 2][i & 3] = v`),
    which NVIDIA's GL compiles to a four-way branch per store, divergent across the lanes: the GL UNet step ran 1.4x
    slower with it (BENCHMARKS.md). Their tiles are `shared float` arrays on GL (LOCAL_FLOAT4S), read as float4s by
    four consecutive floats."""
    tiled = {name: body for name, (path, body) in glsl_kernels(act_half).items() if path == "gpu/kernels/gemm_tiled.kern"}
    assert len(tiled) >= 30 and any(n.startswith("conv_t") for n in tiled) and "gemm_t16x64" in tiled
    for name, body in tiled.items():
        if name.startswith("gemm_splitk_reduce"):
            continue
        shared = dict((arr, typ) for typ, arr in re.findall(r"^shared (\w+) (\w+)\[", body, re.M))
        shared.pop("rows", None)  # the conv instances' int4 row table (whole int4s only)
        assert shared and set(shared.values()) == {"float"}, (name, shared)
        assert ("As4" in shared) != name.startswith("gemm_s"), (name, shared)  # gemm_s16x128 stages A in `lds`
        for arr in shared:  # no vector subscript of a tile element
            assert not re.search(rf"\b{arr}\[[^\]]*\]\[", body), (name, arr)


# Kernels that still store single floats into a shared vec4 array, outside their hot loops: the flash kernels'
# per-row softmax reductions (`lds`, once per tile row) and the short attention's probability tile (`qp`, also read
# as the Q chunk through float4s; attn_short runs on short key sequences only).
_VEC4_SCALAR_STORES_ALLOWED = {"lds", "qp"}


def test_no_hot_tile_stores_one_float_into_a_vec4_array():
    """Every local array written one float at a time in a kernel's main loop is a LOCAL_FLOAT4S tile on GL (see the
    GEMM test above): the GEMM / conv tiles and the flash attention's probability tile `ps` (the VAE's 512-wide
    heads run attn_flash_d512)."""
    seen = set()
    for name, (path, body) in glsl_kernels().items():
        for arr in re.findall(r"^shared (?:vec4|ivec4) (\w+)\[", body, re.M):
            if re.search(rf"\b{arr}\[[^\]]*\]\[[^\]]*\]\s*=[^=]", body):
                seen.add(arr)
                assert arr in _VEC4_SCALAR_STORES_ALLOWED, (name, arr)
    assert seen == _VEC4_SCALAR_STORES_ALLOWED  # the list stays exact
    assert "shared float ps[" in glsl_kernels()["attn_flash_d512"][1]
