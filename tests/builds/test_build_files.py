"""The Bazel build (custom_ops/BUILD) and the CMake build (custom_ops/CMakeLists.txt) compile the same delegate: the
same C++ sources, and the kernels from the same lists (opencl_kernels.txt, gl_shaders.txt) through the same embedding.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "custom_ops"
CC = re.compile(r"(?:abi|backends|common|delegate|gpu|ops)/[\w/]+\.cc")


def _bazel_list(build: str, name: str) -> list[str]:
    body = re.search(rf"^{name} = \[(.*?)^\]", build, re.M | re.S)
    assert body, name
    return CC.findall(body.group(1))


def _kernel_list(name: str) -> list[str]:
    lines = (SRC / name).read_text().splitlines()
    return [f for f in (re.sub(r"#.*", "", line).strip() for line in lines) if f]


def test_bazel_compiles_the_sources_cmake_compiles():
    cmake = set(CC.findall((SRC / "CMakeLists.txt").read_text()))
    build = (SRC / "BUILD").read_text()
    bazel = [f for name in ("CORE_SRCS", "GPU_SRCS", "OPENCL_SRCS", "GL_SRCS") for f in _bazel_list(build, name)]
    assert len(bazel) == len(set(bazel))
    assert set(bazel) == cmake
    assert all((SRC / f).is_file() for f in bazel)


def test_both_builds_embed_every_kernel_file_from_the_shared_lists():
    cmake = (SRC / "CMakeLists.txt").read_text()
    build = (SRC / "BUILD").read_text()
    for name, ext in (("opencl_kernels.txt", "cl"), ("gl_shaders.txt", "glsl")):
        assert f"sdgpu_read_source_list({name}" in cmake and f'$(location {name})' in build
        listed = _kernel_list(name)
        on_disk = sorted(str(p.relative_to(SRC)) for p in SRC.rglob(f"*.{ext}"))
        assert sorted(listed) == on_disk, f"{name} and the .{ext} files in custom_ops/ differ"


def _embed(list_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SRC / "embed_sources.sh"), str(list_file), "sdgpu::ocl", "KernelSource", "SDGPUCL",
                           "// ---- "], capture_output=True, text=True)


def test_embed_sources_writes_the_files_in_list_order_as_one_raw_string():
    r = _embed(SRC / "opencl_kernels.txt")
    assert r.returncode == 0, r.stderr
    files = _kernel_list("opencl_kernels.txt")
    assert r.stdout.startswith('namespace sdgpu::ocl {\nconst char* KernelSource() {\n  return R"SDGPUCL(// ---- ')
    assert r.stdout.endswith(')SDGPUCL";\n}\n}  // namespace sdgpu::ocl\n')
    markers = re.findall(r"^// ---- (\S+)$", r.stdout.replace('R"SDGPUCL(', 'R"SDGPUCL(\n', 1), re.M)
    assert markers == files
    first = (SRC / files[0]).read_text()
    assert f"// ---- {files[0]}\n{first}\n// ---- {files[1]}\n" in r.stdout  # CMake's layout: marker, text, newline


def test_embed_sources_fails_on_a_missing_file(tmp_path: Path):
    (tmp_path / "kernels.txt").write_text("# comment\nthere.cl  # trailing comment\n")
    r = _embed(tmp_path / "kernels.txt")
    assert r.returncode != 0
    assert r.stderr.strip() == f"embed_sources.sh: {tmp_path / 'kernels.txt'} names there.cl, which does not exist"


@pytest.mark.parametrize("preset", ["aarch64-linux-gnu", "android-arm64-v8a"])
def test_cmake_presets_name_the_cross_toolchains(preset: str):
    r = subprocess.run(["cmake", "--list-presets"], cwd=SRC, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f'"{preset}"' in r.stdout
