"""The kernel dialect's GLSL generator (custom_ops/gpu/dialect/gen_glsl.py) on small sources: translations the
kernel files rely on, checked without a build or a GL driver."""
from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from types import ModuleType

import pytest

from kernel_dialect import DIALECT, cpp_command


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
