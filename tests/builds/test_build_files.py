"""The Bazel build (custom_ops/BUILD) and the CMake build (custom_ops/CMakeLists.txt) compile the same delegate: the
same C++ sources, and byte for byte the same embedded kernel programs, generated from the lists both read
(gpu/kernel_sources.txt, backends/opencl/kernel_sources.txt) by the same steps (Bazel: embed_sources.sh).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "custom_ops"
BAZEL_DELEGATE_LISTS = ("CORE_SRCS", "GPU_SRCS", "OPENCL_SRCS", "GL_SRCS")


def cmake_delegate_sources(cmake: str) -> list[str]:
    """The .cc files CMakeLists.txt compiles into the delegate: every relative .cc path outside comments, however the
    lines are laid out (the generated ${CMAKE_CURRENT_BINARY_DIR}/....cc files excluded)."""
    return re.findall(r"(?<![\w./}-])([\w-]+(?:/[\w.-]+)*\.cc)\b", re.sub(r"#.*", "", cmake))


def bazel_list(build: str, name: str) -> list[str]:
    """The strings of the Starlark list `name = [...]` in a BUILD file."""
    body = re.search(rf"^{name} = \[(.*?)^\]", build, re.M | re.S)
    assert body, f"custom_ops/BUILD has no list {name}"
    return re.findall(r'"([^"]+)"', body.group(1))


def bazel_delegate_sources(build: str) -> list[str]:
    return [f for name in BAZEL_DELEGATE_LISTS for f in bazel_list(build, name)]


def source_differences(cmake: str, build: str) -> tuple[set[str], set[str]]:
    """(compiled by CMake only, compiled by Bazel only)."""
    c, b = set(cmake_delegate_sources(cmake)), set(bazel_delegate_sources(build))
    return c - b, b - c


def listed(rel: str) -> list[str]:
    """A kernel list as CMake reads it: file(STRINGS ... REGEX "^[^#]")."""
    return [ln for ln in (SRC / rel).read_text().splitlines() if ln and not ln.startswith("#")]


def test_bazel_compiles_the_sources_cmake_compiles():
    cmake, build = (SRC / "CMakeLists.txt").read_text(), (SRC / "BUILD").read_text()
    bazel = bazel_delegate_sources(build)
    assert len(bazel) == len(set(bazel))
    assert source_differences(cmake, build) == (set(), set())
    assert all((SRC / f).is_file() for f in bazel)


def test_a_source_missing_from_either_build_is_reported():
    cmake, build = (SRC / "CMakeLists.txt").read_text(), (SRC / "BUILD").read_text()
    assert '    "gpu/ops.cc",\n' in build and "  gpu/ops.cc\n" in cmake
    assert source_differences(cmake, build.replace('    "gpu/ops.cc",\n', "")) == ({"gpu/ops.cc"}, set())
    assert source_differences(cmake.replace("  gpu/ops.cc\n", ""), build) == (set(), {"gpu/ops.cc"})
    new = cmake.replace("  gpu/ops.cc\n", "  gpu/ops.cc\n  gpu/not_yet_written.cc\n")
    assert source_differences(new, build) == ({"gpu/not_yet_written.cc"}, set())
    new = cmake + "target_sources(sdgpu_delegate PRIVATE common/also_new.cc)  # common/not_a_source.cc\n"
    assert source_differences(new, build) == ({"common/also_new.cc"}, set())


def test_every_cc_file_is_in_the_delegate_or_a_test_entry_point():
    delegate = set(cmake_delegate_sources((SRC / "CMakeLists.txt").read_text()))
    on_disk = {str(p.relative_to(SRC)) for p in SRC.rglob("*.cc")}
    # ops/<op>/testing_c_api.cc, common/<unit>_testing_c_api.cc: C entry points that the native tests compile with the
    # code they test.
    assert {f for f in on_disk - delegate if not f.endswith("testing_c_api.cc")} == set()


def test_the_kernel_lists_name_every_kernel_file():
    assert sorted(listed("gpu/kernel_sources.txt")) == sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.kern"))
    assert sorted(listed("backends/opencl/kernel_sources.txt")) == sorted(
        str(p.relative_to(SRC)) for p in SRC.rglob("*.cl"))
    cmake, build = (SRC / "CMakeLists.txt").read_text(), (SRC / "BUILD").read_text()
    gl_only = re.search(r"set\(SDGPU_GL_SHADERS\n(.*?)\)", cmake, re.S)
    assert gl_only and gl_only.group(1).split() == bazel_list(build, "GL_ONLY_SHADERS")
    assert sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.glsl")) == sorted(
        bazel_list(build, "GL_ONLY_SHADERS") + ["gpu/dialect/glsl_runtime.glsl"])


def _embed(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SRC / "embed_sources.sh"), args[0], str(root), *args[1:]],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def cmake_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A configured (not compiled) CMake build of the delegate: the embedded programs are written at configure time."""
    out = tmp_path_factory.mktemp("cmake")
    r = subprocess.run(["cmake", "-S", str(SRC), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_bazel_embeds_the_opencl_program_cmake_embeds(cmake_build: Path):
    r = _embed(SRC, "opencl")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (cmake_build / "opencl_kernel_source.cc").read_text()
    files = ["gpu/dialect/prelude.h", *listed("gpu/kernel_sources.txt"), *listed("backends/opencl/kernel_sources.txt")]
    assert re.findall(r"^// ---- (\S+)$", r.stdout, re.M) == files
    assert r.stdout.startswith('namespace sdgpu::ocl {\nconst char* KernelSource() {\n  return R"SDGPUCL('
                               "#define SD_API_OPENCL 1\n// ---- gpu/dialect/prelude.h\n")
    assert "#pragma once" not in r.stdout


def test_bazel_embeds_the_gl_shaders_cmake_embeds(cmake_build: Path):
    cxx = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.+)$", (cmake_build / "CMakeCache.txt").read_text(), re.M)
    assert cxx
    build = (SRC / "BUILD").read_text()
    r = _embed(SRC, "gl", f"{cxx.group(1)} -E", *bazel_list(build, "GL_ONLY_SHADERS"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (cmake_build / "gl_shader_source.cc").read_text()
    # four libraries: float and half activation storage (ShaderSource, ShaderSourceActHalf) of the same files, and
    # their compact variants (gen_glsl.py --compact) of the kernels whose compact form differs (the tiled GEMMs' files)
    libraries = re.findall(r'R"SDGPUGL\((.*?)\)SDGPUGL"', r.stdout, re.S)
    names = ("ShaderSource", "ShaderSourceActHalf", "ShaderSourceCompact", "ShaderSourceActHalfCompact")
    assert len(libraries) == 4 and all(f"const char* {n}()" in r.stdout for n in names)
    every = ["gpu/dialect/glsl_runtime.glsl", *listed("gpu/kernel_sources.txt"), "backends/gl/shaders/common.glsl"]
    for text in libraries[:2]:
        assert re.findall(r"^//== file (\S+)$", "\n" + text, re.M) == every
    for text in libraries[2:]:
        kernel_files = re.findall(r"^//== file (\S+)$", "\n" + text, re.M)
        assert "gpu/kernels/gemm_tiled.kern" in kernel_files and kernel_files == [f for f in every if f in kernel_files]


def test_embed_sources_fails_on_a_missing_file(tmp_path: Path):
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "kernel_sources.txt").write_text("# comment\ngpu/kernels/there.kern\n")
    r = _embed(tmp_path, "opencl")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "embed_sources.sh: gpu/kernel_sources.txt names gpu/kernels/there.kern, which does not exist\n"
    r = _embed(tmp_path, "gl", "c++ -E")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "embed_sources.sh: gpu/kernel_sources.txt names gpu/kernels/there.kern, which does not exist\n"


def test_bazel_genrules_run_embed_sources_on_the_shared_lists():
    build = (SRC / "BUILD").read_text()
    for name, mode in (("opencl_kernel_source", "opencl"), ("gl_shader_source", "gl")):
        rule = re.search(rf'genrule\(\n    name = "{name}",(.*?)^\)', build, re.M | re.S)
        assert rule, name
        assert f"$(location embed_sources.sh) {mode} " in rule.group(1)
        assert '"gpu/kernel_sources.txt"' in rule.group(1)
    assert "'$(CC) -E'" in build  # the C preprocessor of the Bazel C++ toolchain, as CMake uses its compiler's


@pytest.mark.parametrize("preset", ["aarch64-linux-gnu", "android-arm64-v8a"])
def test_cmake_presets_name_the_cross_toolchains(preset: str):
    assert shutil.which("cmake")
    r = subprocess.run(["cmake", "--list-presets"], cwd=SRC, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f'"{preset}"' in r.stdout
