"""Locate and load the native ``libsdgpu_delegate.so`` TFLite delegate.

The delegate runs the fused ``Sd*`` custom ops (SdAttention, SdGelu,
SdGroupNorm) that ``sdconvert`` writes into .tflite files; builtin ops stay
with the runtime (XNNPACK). It is built from ``custom_ops/`` by
scikit-build-core and installed next to this module.

Lookup order of :func:`delegate_path`: a library set by :func:`use_library`
(``sdlite bench --external_delegate_path``), the ``SDLITE_DELEGATE_PATH``
environment variable (for custom builds, e.g. ``build/dev`` while iterating),
then every directory of the ``sdlite`` package. The override is read at call
time; importing this module has no side effects.

Trade-off: :func:`stats` and :func:`check_op_options` reach the library
through ``ctypes`` (a second ``dlopen`` of the same file returns the same
handle, so they see the delegate objects created by ``load``); they are
diagnostics, not part of the inference path.

:func:`extra_options` adds options (e.g. ``profile_path``) to every delegate
created inside a ``with`` block, through whichever caller ends up in
:func:`load` (``sdlite.runner`` builds delegates from ``BackendOptions``, which
carry no diagnostics). It is a context variable, so it is scoped to the block
and to the current thread / asyncio task, never process-wide.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import BackendUnavailableError

ENV_DELEGATE_PATH = "SDLITE_DELEGATE_PATH"
LIBRARY_NAME = "libsdgpu_delegate.dylib" if sys.platform == "darwin" else "libsdgpu_delegate.so"
BACKENDS = ("cpu", "opencl", "gl")
LOG_LEVELS = ("silent", "error", "warning", "info", "debug")
LAYER_NORM_FOLDS = ("auto", "twin", "rows")
TENSOR_CORES = ("auto", "off", "3xtf32", "fp64")
CACHE_PROGRAMS = ("auto", "1", "0")
WEIGHT_UPLOADS = ("auto", "ring", "direct")
# Options that take one of a few strings (None = the delegate's default)
CHOICE_OPTIONS = {"layer_norm_fold": LAYER_NORM_FOLDS, "tensor_cores": TENSOR_CORES, "cache_programs": CACHE_PROGRAMS,
                  "weight_uploads": WEIGHT_UPLOADS}
# Integer options and their range (the delegate's ranges, delegate/options.cc)
INT_RANGES = {"num_threads": (1, 256), "attention_block_q": (1, 1024), "attention_block_k": (1, 4096),
              "cache_max_mb": (1, 1048576), "tuning_budget_ms": (0, 3600000)}
# Options that are tri-state flags (None = the delegate's default), passed as "1" / "0"
FLAG_OPTIONS = ("gemm_autotune", "fuse_epilogues", "setup_progress", "release_weight_pages", "gl_finish_each",
                "gl_plain_buffers", "gl_nv_pragmas")


class NativeDelegateError(BackendUnavailableError):
    """The native delegate is missing, rejected its options, or failed to load (one-line message)."""


@dataclass(frozen=True)
class DelegateOptions:
    """Options understood by the delegate (sent as strings through ``load_delegate``).

    ``num_threads=None`` lets the delegate pick (hardware concurrency, capped at 8).
    ``attention_block_q/k`` override the SdAttention CPU tile sizes (mainly for tests).
    ``profile_path`` (GPU backends): the delegate writes per-node device kernel times (JSON, averaged over
    all invocations so far) to this file after every invoke; it also turns on queue profiling.
    ``cache_dir`` (GPU backends): the persistent cache folder (``"none"`` = off; unset = the delegate's default,
    ``$XDG_CACHE_HOME/sdgpu`` or ``~/.cache/sdgpu``), shared by both GPU backends and every process: compiled programs
    and measured GEMM tile choices, so a later start skips that set-up (``custom_ops/common/disk_cache.h``).
    ``cache_max_mb``: that folder's size cap (least recently used entries go first; delegate default 1024).
    ``opencl_cache_dir``: deprecated spelling of ``cache_dir`` (the delegate logs one warning; an error when both are
    set and differ).
    ``cache_programs`` (OpenCL): ``"auto"`` (delegate default) stores program binaries for GPUs, not for CPU devices
    such as PoCL (reading a CPU program's binary compiles every kernel in it); ``"1"`` always; ``"0"`` never.
    ``tuning_budget_ms`` (GPU backends): host time the GEMM tile tuner may spend per delegate (default 1000); shapes
    left when it runs out keep the cost model's plan, cached as their choice under that budget: a later start with the
    same budget tunes nothing, one with a larger budget tunes them.
    ``setup_progress`` (GPU backends; unset = on): the delegate prints a progress line every few seconds while a
    set-up phase runs longer than 3 s; sdlite turns it off where it shows its own progress bar.
    ``weights_fp16`` (GPU backends): store the constant GEMM/conv/Winograd weights as half on the device
    (half the weight memory; fp32 arithmetic, ~1e-3 relative error).
    ``activations_fp16`` (GPU backends): store the partition's float tensors (activations, the constants ops read
    like them, the Winograd transforms' intermediates) as half on the device: half the arena's bytes and memory
    traffic; fp32 arithmetic; inputs and outputs stay float32 (converted at the partition's edge). The coarsest
    level of an image model keeps float32 storage (float storage islands). A node whose kernels keep float32
    storage runs on the CPU while it is on.
    ``release_weight_pages`` (GPU backends; unset = the delegate's default, on): give back the pages of the model
    file LiteRT mapped once the device holds what was made from them (stats ``host_pages_released_bytes``).
    ``gemm_autotune`` (GPU backends; unset = the delegate's default, on): time the GEMM/conv tile configs of
    each distinct shape at the first invoke and keep the fastest (a slower first run for faster steady-state
    steps; see ``TileTuner`` in ``custom_ops/gpu/matmul_ops.h``).
    ``fuse_epilogues`` (GPU backends; unset = the delegate's default, on): fold a residual ADD into the epilogue
    of the FULLY_CONNECTED / CONV_2D / SdConv2DWinograd that produces one operand, and a gated SdGelu into the
    FULLY_CONNECTED that feeds it, and an SdGroupNorm(+SiLU) into the input transform of the SdConv2DWinograd it
    feeds (one launch and one pass over the activation less per folded node; the SdConv2DWinograd folds on OpenCL
    only for now; see ``GpuPartition`` in ``custom_ops/gpu/partition.h``).
    ``attention_key_splits`` (GPU backends; unset = the delegate's default, 0 = auto): split each SdAttention
    query block's keys into this many ranges run as separate work-groups and merged by one more launch (flash
    attention on the row-wise tilings). Auto splits in 2 only the head-dim-80 tiling's grids of at most one
    work-group per compute unit (SD1.5's 32x32 self-attention at batch 1 on a large GPU: 8% faster on an H200,
    the only case measured faster); 1 never splits.
    ``gemm_tiles`` (GPU backends; benchmarks and tests): ``"BMxBN[nTHREADS|tc][/splits]"``, e.g. ``"64x64n128/2"``,
    forces that tile config and split count on every tiled GEMM / conv (no tuning; ``"64x64tc"``: a tensor-core
    config, OpenCL on NVIDIA, FP64 where ``tensor_cores`` resolves to ``"fp64"``, else 3xTF32); malformed is rejected by the delegate when it loads, a config the backend
    lacks when the first GEMM is built (a GEMM without its kernel then falls back to the untiled one).
    ``attention_tiling`` (GPU backends; benchmarks and tests): an SdAttention tiling suffix (``"r40"``, ``"h80"``,
    ``"dyn"``, ...; ``"legacy"`` = the fallback kernels; ``"short"`` = the one-launch kernels for at most 80 keys,
    ``"short16"`` / ``"short32"`` / ``"short64"`` with that query block) used for every attention whose head dim
    (and, for ``"short*"``, key count) it fits; a tiling whose local memory, work-group size or kernel the device lacks
    is ignored (a ``"short*"`` block: the largest block that fits runs).
    ``layer_norm_fold`` (GPU backends; unset = the delegate's default, ``"twin"``): how a LayerNorm folded into the
    FULLY_CONNECTED that reads it runs: ``"twin"`` inside the GEMM (its LayerNorm twin kernels), ``"rows"`` as one
    ``layer_norm_rows`` launch into the FC's scratch before the plain GEMM, ``"auto"`` whichever the tuner times
    faster per shape (``"twin"`` when ``gemm_autotune`` is off). On the H200 ``auto`` gained at most 1.5% per
    GEGLU at batch 2 and lost 11% on others at batch 1 (BENCHMARKS.md).
    ``tensor_cores`` (OpenCL; unset = the delegate's default, ``"auto"``): ``"auto"`` is ``"fp64"`` on NVIDIA GPUs of
    compute capability 9 or newer (where the delegate builds those kernels) and ``"off"`` elsewhere. ``"3xtf32"`` runs
    on NVIDIA tensor cores with 3xTF32 products, an fp32-accurate emulation (each product as big*big + big*small + small*big of its TF32
    halves, fp32 accumulation): SdAttention's long self-attention at head dim 40 and 80 (SD1.5's 64x64 and, for grids
    of more than one wave, 32x32 levels) and the tiled GEMMs and convolutions (FULLY_CONNECTED, BATCH_MATMUL,
    CONV_2D, Winograd's batched GEMM). On an H200 the fused + Winograd SD1.5 UNet step is 14-18% faster and its parity
    ~3e-5 of the output's range where fp32 gives ~2e-5.
    Needs NVIDIA's OpenCL (inline PTX, Ampere or newer); elsewhere the fp32 kernels run. ``"fp64"`` runs the same
    ops on the FP64 tensor cores (Hopper or newer): fp32 data converted to double exactly, exact products, fp64 sums
    rounded to fp32 once, so the products are at least as accurate as fp32 FMAs (the softmax stays fp32); GEMMs
    1.25-1.45x and head-dim-40 attention 1.2x faster than the fp32 kernels, the SD1.5 UNet step 7-12% faster with
    full-UNet parity 1.1e-5 against 2.1e-5, on an H200 (BENCHMARKS.md). ``"off"`` keeps fp32 FMA
    arithmetic everywhere.
    ``weight_uploads`` (OpenCL; unset = the delegate's default, ``"auto"``): how the first invoke uploads the model's
    weights: ``"ring"`` through host-visible staging buffers that all host cores fill (page-locked on a discrete GPU:
    SD1.5's UNet weights went up at 9.2-9.6 GB/s instead of 4.0-4.3 on an H200 host), ``"direct"`` one driver write
    from the model's memory each; ``"auto"`` is ``"ring"`` on a device without unified host memory, else ``"direct"``.
    GL debugging knobs (for localising a driver-specific parity failure, not for production;
    ``custom_ops/backends/gl/gl_device.h``): ``gl_finish_each`` (glFinish after every launch), ``gl_barrier``
    (``"minimal"``: SHADER_STORAGE | BUFFER_UPDATE barrier bits only; default ``"all"``), ``gl_plain_buffers`` (no
    readonly / writeonly qualifiers), ``gl_nv_pragmas`` (``False``: the sources' ``#pragma optionNV`` lines dropped),
    ``gl_kernel_alias`` (``"a=b,c=d"``: kernel b compiled where an op asks for a) and ``gl_dump_dir`` (a folder for
    each compiled program's source and driver binary).
    ``gl_limits`` (GL; tests and tuning): ``"shared_bytes=N,invocations=N,group_size_x=N,storage_blocks=N,
    storage_block_bytes=N,compute_units=N,pbuffer=1"`` (any subset): the device reports a smaller device's limits
    (capped at N, never raised; e.g. GL ES 3.1's minimums ``shared_bytes=16384,invocations=128``; ``group_size_x``: a
    work-group's largest x size, which may be below the invocation limit), so the planners choose what such a
    device can run, and N compute units (GL has no query for them; planners that size grids by them then act as on
    OpenCL); ``pbuffer=1``: the context is current on a 1x1 pbuffer surface, as on a display without
    ``EGL_KHR_surfaceless_context`` (the Android emulator), where that happens by itself.
    ``opencl_limits`` (OpenCL; tests and tuning): ``"max_alloc_bytes=N"``: the device reports at most N bytes for one
    buffer (``CL_DEVICE_MAX_MEM_ALLOC_SIZE``, capped, never raised; Qualcomm's Adreno drivers report ~1 GB), so a
    partition's arena is planned in several buffers and a larger tensor's node runs on the CPU, as on such a phone.
    """

    backend: str = "cpu"
    log_level: str = "warning"
    num_threads: int | None = None
    attention_block_q: int | None = None
    attention_block_k: int | None = None
    profile_path: str | None = None
    cache_dir: str | None = None
    cache_max_mb: int | None = None
    opencl_cache_dir: str | None = None
    cache_programs: str | None = None
    tuning_budget_ms: int | None = None
    setup_progress: bool | None = None
    release_weight_pages: bool | None = None
    weights_fp16: bool = False
    activations_fp16: bool = False
    gemm_autotune: bool | None = None
    fuse_epilogues: bool | None = None
    attention_key_splits: int | None = None
    gemm_tiles: str | None = None
    attention_tiling: str | None = None
    layer_norm_fold: str | None = None
    tensor_cores: str | None = None
    weight_uploads: str | None = None
    gl_finish_each: bool | None = None
    gl_barrier: str | None = None
    gl_plain_buffers: bool | None = None
    gl_nv_pragmas: bool | None = None
    gl_kernel_alias: str | None = None
    gl_dump_dir: str | None = None
    gl_limits: str | None = None
    opencl_limits: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise NativeDelegateError(f"unknown backend {self.backend!r} (expected one of {', '.join(BACKENDS)})")
        if self.log_level not in LOG_LEVELS:
            raise NativeDelegateError(f"unknown log_level {self.log_level!r} (expected one of {', '.join(LOG_LEVELS)})")
        for name, (least, most) in INT_RANGES.items():
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or not least <= value <= most):
                raise NativeDelegateError(f"{name} must be an int in {least}..{most}, got {value!r}")
        if self.opencl_cache_dir is not None:
            if self.cache_dir is not None and self.cache_dir != self.opencl_cache_dir:
                raise NativeDelegateError(
                    f"cache_dir {self.cache_dir!r} and opencl_cache_dir {self.opencl_cache_dir!r} (its deprecated "
                    "spelling) differ; set cache_dir only")
        value = self.attention_key_splits
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 64):
            raise NativeDelegateError(f"attention_key_splits must be an int in 0..64, got {value!r}")
        for name in ("weights_fp16", "activations_fp16"):
            if not isinstance(getattr(self, name), bool):
                raise NativeDelegateError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name in FLAG_OPTIONS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise NativeDelegateError(f"{name} must be a bool or None, got {value!r}")
        if self.gl_barrier not in (None, "all", "minimal"):
            raise NativeDelegateError(f"gl_barrier must be 'all', 'minimal' or None, got {self.gl_barrier!r}")
        for name in ("gemm_tiles", "attention_tiling", "gl_kernel_alias", "gl_dump_dir", "gl_limits", "opencl_limits",
                     "cache_dir", "opencl_cache_dir"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise NativeDelegateError(f"{name} must be a str or None, got {value!r}")
        for name, choices in CHOICE_OPTIONS.items():
            value = getattr(self, name)
            if value not in (None, *choices):
                raise NativeDelegateError(f"{name} must be one of {', '.join(choices)} or None, got {value!r}")
        # the rest (gemm_tiles syntax, attention_tiling names, a usable profile_path) by the delegate's own parser,
        # so an option is judged the same whether or not a model ends up loading the delegate
        problem, _ = check_options_native(self.as_strings())
        if problem:
            raise NativeDelegateError(problem)

    def as_strings(self) -> dict[str, str]:
        """The ``{key: value}`` dict passed to ``load_delegate`` (unset options omitted)."""
        out = {"backend": self.backend, "log_level": self.log_level}
        for name in ("num_threads", "attention_block_q", "attention_block_k", "attention_key_splits", "cache_max_mb",
                     "tuning_budget_ms"):
            value = getattr(self, name)
            if value is not None:
                out[name] = str(value)
        if self.cache_dir:
            out["cache_dir"] = self.cache_dir
        elif self.opencl_cache_dir:  # the delegate warns once that it is deprecated
            out["opencl_cache_dir"] = self.opencl_cache_dir
        for name in ("profile_path", "gemm_tiles", "attention_tiling", "layer_norm_fold", "tensor_cores",
                     "weight_uploads", "cache_programs", "gl_barrier", "gl_kernel_alias", "gl_dump_dir", "gl_limits",
                     "opencl_limits"):
            value = getattr(self, name)
            if value:
                out[name] = str(value)
        if self.weights_fp16:
            out["weights_fp16"] = "1"
        if self.activations_fp16:
            out["activations_fp16"] = "1"
        for name in FLAG_OPTIONS:
            value = getattr(self, name)
            if value is not None:
                out[name] = "1" if value else "0"
        return out


_EXTRA_OPTIONS: ContextVar[dict[str, Any]] = ContextVar("sdgpu_extra_options", default={})


@contextmanager
def extra_options(**opts: Any) -> Iterator[None]:
    """Add :class:`DelegateOptions` fields to every :func:`load` inside the block (explicit arguments win).

    ``with native.extra_options(profile_path="/tmp/p.json"): runner = open_runner(...)`` profiles the
    delegate of that runner only. Unknown option names are rejected here, not at the first load.
    """
    unknown = sorted(set(opts) - set(DelegateOptions.__dataclass_fields__) - {"backend"})
    if unknown:
        raise NativeDelegateError(f"unknown delegate option(s): {', '.join(unknown)}")
    token = _EXTRA_OPTIONS.set({**_EXTRA_OPTIONS.get(), **opts})
    try:
        yield
    finally:
        _EXTRA_OPTIONS.reset(token)


def _typed(key: str, value: Any) -> Any:
    """``value`` of delegate option ``key`` with its :class:`DelegateOptions` type; strings are converted (flags take
    1/0/true/false, counts an int), typed values pass through to the dataclass checks."""
    fields = DelegateOptions.__dataclass_fields__
    if key == "backend" or key not in fields:
        known = ", ".join(k for k in fields if k != "backend")
        raise NativeDelegateError(f"unknown delegate option {key!r} (known: {known}; the backend has its own flag)")
    if not isinstance(value, str):
        return value
    kind = str(fields[key].type)
    if "bool" in kind:
        if value.lower() not in ("1", "0", "true", "false"):
            raise NativeDelegateError(f"delegate option {key} takes 1/0/true/false, got {value!r}")
        return value.lower() in ("1", "true")
    if "int" in kind:
        try:
            return int(value)
        except ValueError:
            raise NativeDelegateError(f"delegate option {key} takes an integer, got {value!r}") from None
    return value


def typed_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A ``{key: value}`` mapping (values as strings, the form ``load_delegate`` takes, or typed) -> checked
    :class:`DelegateOptions` fields for :func:`extra_options`; one-line :class:`NativeDelegateError` otherwise."""
    out = {str(k): _typed(str(k), v) for k, v in options.items()}
    DelegateOptions(**out)  # the same checks as load(): a bad value fails before any model is read
    return out


def parse_options_text(text: str) -> dict[str, Any]:
    """``"key:value;key:value"`` (benchmark_model's ``--external_delegate_options`` form) -> :class:`DelegateOptions`
    fields with their Python types (flags take 1/0/true/false, counts an int), for :func:`extra_options`. A malformed
    entry, an unknown key or a bad value is a one-line :class:`NativeDelegateError`; an option that parses but cannot
    do its job (an unwritable ``opencl_cache_dir``) is a warning."""
    options = typed_options(dict(parse_items(text)))
    import warnings

    for line in check_options_native(DelegateOptions(**options).as_strings())[1]:
        warnings.warn(line, stacklevel=2)
    return options


def parse_items(text: str) -> list[tuple[str, str]]:
    """``"key:value;key:value"`` -> ``[(key, value), ...]`` as strings (no check of the keys)."""
    out = []
    for item in (i.strip() for i in text.split(";")):
        if not item:
            continue
        key, sep, value = (x.strip() for x in item.partition(":"))
        if not sep or not key:
            raise NativeDelegateError(f"delegate option {item!r} is not key:value")
        out.append((key, value))
    return out


_LIBRARY: ContextVar[Path | None] = ContextVar("sdgpu_library", default=None)


def check_library(path: Path | str) -> Path:
    """``path`` resolved, after checking it is a build of this delegate (it exports ``sdgpu_version``)."""
    lib = Path(path).expanduser()
    if lib.is_dir():
        lib = lib / LIBRARY_NAME
    if not lib.is_file():
        raise NativeDelegateError(f"delegate library not found: {path}")
    try:
        handle = ctypes.CDLL(str(lib.resolve()))
    except OSError as exc:
        raise NativeDelegateError(f"cannot load {path}: {exc}") from None
    if not hasattr(handle, "sdgpu_version"):
        raise NativeDelegateError(f"{path} is not a build of {LIBRARY_NAME} (it has no sdgpu_version symbol); "
                                  "sdlite loads only its own delegate")
    return lib.resolve()


@contextmanager
def use_library(path: Path | str) -> Iterator[Path]:
    """Inside the block, :func:`load`, :func:`stats` and friends use the delegate library at ``path`` (checked by
    :func:`check_library`) instead of the packaged one: ``sdlite bench --external_delegate_path``. Scoped like
    :func:`extra_options`."""
    token = _LIBRARY.set(check_library(path))
    try:
        yield _LIBRARY.get()  # type: ignore[misc]
    finally:
        _LIBRARY.reset(token)


@lru_cache(maxsize=1)
def _package_dirs() -> tuple[Path, ...]:
    import sdlite  # the package this module lives in; imported lazily

    dirs = [Path(p) for p in getattr(sdlite, "__path__", [])]
    here = Path(__file__).resolve().parent
    if here not in dirs:
        dirs.append(here)
    return tuple(dirs)


@lru_cache(maxsize=16)
def _resolved(path: str) -> Path:
    """``Path(path).resolve()``, once per path: model validation asks for the library once per fused op (hundreds
    in SD1.5's UNet), and each resolve walks every component of the path with lstat."""
    return Path(path).resolve()


def delegate_path() -> Path:
    """Absolute path of ``libsdgpu_delegate.so``; raises :class:`NativeDelegateError` if it is missing."""
    chosen = _LIBRARY.get()
    if chosen is not None:
        return chosen
    override = os.environ.get(ENV_DELEGATE_PATH)
    if override:
        path = Path(override).expanduser()
        if path.is_dir():
            path = path / LIBRARY_NAME
        if not path.is_file():
            raise NativeDelegateError(f"{ENV_DELEGATE_PATH}={override} does not point to {LIBRARY_NAME}")
        return _resolved(str(path))
    searched = _package_dirs()
    for directory in searched:
        candidate = directory / LIBRARY_NAME
        if candidate.is_file():
            return _resolved(str(candidate))
    where = ", ".join(str(d) for d in searched)
    raise NativeDelegateError(
        f"{LIBRARY_NAME} not found (searched {where}); build it with "
        f"`pip install -e . --no-build-isolation` or set {ENV_DELEGATE_PATH}"
    )


def load(backend: str = "cpu", **opts: Any) -> Any:
    """Create a delegate for ``Interpreter(..., experimental_delegates=[...])``.

    ``opts`` are :class:`DelegateOptions` fields (log_level, num_threads,
    attention_block_q, attention_block_k, profile_path, cache_dir, cache_max_mb, cache_programs, tuning_budget_ms,
    setup_progress, release_weight_pages, weights_fp16, activations_fp16, gemm_autotune,
    fuse_epilogues, attention_key_splits, gemm_tiles, attention_tiling, layer_norm_fold, tensor_cores, weight_uploads,
    gl_*),
    on top of those of an enclosing :func:`extra_options` block. Returns the
    ``ai_edge_litert`` delegate object; keep it alive as long as the interpreter.
    """
    opts = {**{k: v for k, v in _EXTRA_OPTIONS.get().items() if k != "backend"}, **opts}
    unknown = sorted(set(opts) - set(DelegateOptions.__dataclass_fields__) - {"backend"})
    if unknown:
        raise NativeDelegateError(f"unknown delegate option(s): {', '.join(unknown)}")
    options = DelegateOptions(backend=backend, **opts)
    from ai_edge_litert.interpreter import load_delegate

    path = delegate_path()
    # A file that is not our library fails here, not inside ai_edge_litert's Delegate, whose half-built object
    # would print an ignored AttributeError from its __del__.
    _lib()
    try:
        return load_delegate(str(path), options.as_strings())
    except ValueError as exc:
        detail = [line for line in str(exc).splitlines()[1:] if line.strip()]
        message = detail[-1] if detail else str(exc).splitlines()[0]
        raise NativeDelegateError(f"cannot load {path.name}: {message}") from None


@lru_cache(maxsize=4)
def _library(path: str) -> ctypes.CDLL:
    """The delegate library with its diagnostic entry points typed; OSError if it does not load."""
    lib = ctypes.CDLL(path)
    ints, i64s, strings = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_char_p)
    signatures = {
        "sdgpu_delegate_stats_json": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
        "sdgpu_check_op_options": (
            [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
        "sdgpu_check_node": ([ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                              ctypes.c_int, ints, ints, ints, i64s, ctypes.c_int, ints, ints, ints, i64s,
                              ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
        "sdgpu_check_options": ([strings, strings, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                 ctypes.c_size_t], ctypes.c_int),
        "sdgpu_version": ([], ctypes.c_char_p),
        # the external-delegate plugin ABI that ai_edge_litert's load_delegate calls (the error callback: NULL)
        "tflite_plugin_create_delegate": ([strings, strings, ctypes.c_size_t, ctypes.c_void_p], ctypes.c_void_p),
        "tflite_plugin_destroy_delegate": ([ctypes.c_void_p], None),
    }
    for name, (argtypes, restype) in signatures.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise OSError(f"{path} is not a matching sdgpu delegate build (no {name}; rebuild it)") from None
        fn.argtypes, fn.restype = argtypes, restype
    return lib


def create_plugin_delegate(lib: ctypes.CDLL, options: Mapping[str, str]) -> int | None:
    """A delegate made through the plugin ABI from ``{key: value}`` strings, without ai_edge_litert (no interpreter
    will use it: sdlite.early_device holds one for its device); the pointer for ``tflite_plugin_destroy_delegate``,
    or None where it could not be made (the delegate reports nothing: no error callback)."""
    keys = (ctypes.c_char_p * len(options))(*(k.encode() for k in options))
    values = (ctypes.c_char_p * len(options))(*(v.encode() for v in options.values()))
    return lib.tflite_plugin_create_delegate(keys, values, len(options), None) or None


def _lib() -> ctypes.CDLL:
    path = delegate_path()
    try:
        return _library(str(path))
    except OSError as exc:
        raise NativeDelegateError(f"cannot load {path}: {exc}") from None


def stats(delegate: Any) -> dict[str, Any]:
    """Counters of a delegate returned by :func:`load` (claimed/declined nodes with reasons, scratch bytes...)."""
    pointer = delegate._get_native_delegate_pointer()  # noqa: SLF001 - ai_edge_litert has no public accessor
    lib = _lib()
    size = lib.sdgpu_delegate_stats_json(pointer, None, 0)
    if size < 0:
        raise NativeDelegateError("not an sdgpu delegate")
    # The stats change while the delegate works (another thread may be in its set-up): a text that grew between
    # the two calls came back cut, so ask again with the length it needs (plus room to grow).
    while True:
        buf = ctypes.create_string_buffer(size + 1)
        needed = lib.sdgpu_delegate_stats_json(pointer, buf, size + 1)
        if needed <= size:
            return json.loads(buf.value.decode("utf-8"))
        size = needed + 256


def check_op_options(op_name: str, options: bytes) -> tuple[bool, str]:
    """Run the native options parser of ``op_name`` on raw bytes: ``(ok, error message)``."""
    lib = _lib()
    err = ctypes.create_string_buffer(512)
    rc = lib.sdgpu_check_op_options(op_name.encode(), bytes(options), len(options), err, len(err))
    if rc < 0:
        raise NativeDelegateError(f"unknown op {op_name!r}")
    return rc == 1, err.value.decode("utf-8", "replace")


# TFLite schema TensorType -> the C API's TfLiteType (what the delegate sees); other types map to kTfLiteNoType.
_TFLITE_TYPE = {0: 1, 1: 10, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8, 9: 9, 10: 11}


@dataclass(frozen=True)
class NodeTensor:
    """One input or output of a node as the model file describes it: tensor id (-1 = omitted optional input),
    schema ``TensorType`` value and shape."""

    index: int
    schema_type: int
    shape: tuple[int, ...]


def check_node(op_name: str, version: int, options: bytes | None, inputs: list[NodeTensor],
               outputs: list[NodeTensor]) -> tuple[bool, str]:
    """The delegate's own check of an ``Sd*`` node (version, counts, options, shape rule, output): ``(ok, reason)``.

    The same C++ code decides whether the running delegate claims the node, so a model that passes here is one the
    delegate takes on every backend. Raises :class:`NativeDelegateError` for an op it does not know.
    """
    lib = _lib()

    def arrays(tensors: list[NodeTensor]) -> tuple[Any, Any, Any, Any]:
        n = len(tensors)
        dims = [int(d) for t in tensors for d in t.shape]
        return ((ctypes.c_int * max(n, 1))(*[t.index for t in tensors]),
                (ctypes.c_int * max(n, 1))(*[_TFLITE_TYPE.get(t.schema_type, 0) for t in tensors]),
                (ctypes.c_int * max(n, 1))(*[len(t.shape) for t in tensors]),
                (ctypes.c_int64 * max(len(dims), 1))(*dims))

    blob = bytes(options or b"")
    err = ctypes.create_string_buffer(512)
    rc = lib.sdgpu_check_node(op_name.encode(), int(version), blob, len(blob), len(inputs), *arrays(inputs),
                              len(outputs), *arrays(outputs), err, len(err))
    if rc < 0:
        raise NativeDelegateError(f"unknown op {op_name!r}")
    return rc == 1, err.value.decode("utf-8", "replace")


def check_options_native(options: dict[str, str]) -> tuple[str, list[str]]:
    """The delegate's own options parser on ``{key: value}`` strings, without creating a delegate: ``(error,
    warnings)``, ``error`` ``""`` when they parse; ``warnings`` name options that parse but cannot do their job (an
    unwritable ``opencl_cache_dir``). ``("", [])`` when the library is not built (``load`` reports that)."""
    try:
        lib = _lib()
    except NativeDelegateError:
        return "", []
    keys = (ctypes.c_char_p * max(len(options), 1))(*[k.encode() for k in options])
    values = (ctypes.c_char_p * max(len(options), 1))(*[str(v).encode() for v in options.values()])
    err, warn = ctypes.create_string_buffer(512), ctypes.create_string_buffer(2048)
    ok = lib.sdgpu_check_options(keys, values, len(options), err, len(err), warn, len(warn))
    warnings = [w for w in warn.value.decode("utf-8", "replace").splitlines() if w]
    return ("" if ok == 1 else err.value.decode("utf-8", "replace")), warnings


def profile_node_ms(path: Path | str, run: Callable[[], None]) -> dict[int, float]:
    """Device milliseconds per delegated node, averaged over the invokes ``run()`` makes, read from the per-node
    profile file a delegate loaded with ``profile_path=path`` writes (the delegate's public output; the file's
    reader lives in ``sdlite.bench.device_profile``)."""
    from sdlite.bench.device_profile import ProfileSnapshot, window_average_ms

    before = ProfileSnapshot.read(Path(path))
    run()
    return window_average_ms(before, ProfileSnapshot.read(Path(path)))


def version() -> str:
    """Version string of the native library."""
    return _lib().sdgpu_version().decode()
