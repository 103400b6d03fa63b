"""The kernel dialect's GLSL generator (custom_ops/gpu/dialect/gen_glsl.py) on small sources: what it accepts and
rewrites, and the dialect-rule violations it reports as build errors."""
from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from kernel_dialect import DIALECT, cpp_command


@lru_cache(maxsize=1)
def _gen():
    spec = importlib.util.spec_from_file_location("gen_glsl", DIALECT / "gen_glsl.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _shaders(tmp_path: Path, source: str) -> dict[str, str]:
    gen = _gen()
    path = tmp_path / "k.kern"
    path.write_text(source)
    lines = gen.preprocess(cpp_command().split(), DIALECT / "prelude.h", [path])
    return {k.name: k.text for k in gen.translate(gen.split_items(lines))}


def test_local_array_sizes_may_be_products(tmp_path):
    # instantiation macros size local arrays by expressions of their parameters: `*` there is no pointer
    shaders = _shaders(tmp_path, """
#define BQ 32
KERNEL void k(GLOBAL float* y, int yo) {
  LOCAL float4 t[(BQ) * ((40 + 3) / 4 | 1)];
  LOCAL float r[2 * (BQ) * 8];
  t[get_local_id(0)] = (float4)(1.0f);
  r[0] = 2.0f;
  BARRIER();
  y[yo] = t[0].s1 + LGETC(t, 5) + LLD4(t, 4).s2 + r[0];
}
""")
    text = shaders["k"]
    assert "shared vec4 t[(32) * ((40 + 3) / 4 | 1)];" in text and "shared float r[2 * (32) * 8];" in text
    assert "t[(5) >> 2][(5) & 3]" in text and "t[(4) >> 2].z" in text and "vec4(1.0f)" in text


def test_local_pointer_is_still_a_dialect_error(tmp_path):
    gen = _gen()
    with pytest.raises(gen.DialectError, match="LOCAL declaration"):
        _shaders(tmp_path, "KERNEL void k(GLOBAL float* y, int yo) {\n  LOCAL float* p[4];\n  y[yo] = 0.0f;\n}\n")


def test_capability_switches_are_off_on_glsl(tmp_path):
    # the portable twin of a vendor-only body is what GL compiles
    shaders = _shaders(tmp_path, """
#if SD_HAS_NV_SHFL
#define SUM2(v) ((v) + nv_shfl_xor((v), 1))
#else
#define SUM2(v) ((v) * 2.0f)
#endif
KERNEL void k(GLOBAL float* y, int yo) { y[yo] = SUM2(y[yo]); }
""")
    assert "nv_shfl_xor" not in shaders["k"] and "* 2.0f" in shaders["k"]
