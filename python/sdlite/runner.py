"""One .tflite model on one backend: feed named numpy inputs, get named outputs, know what ran where.

Two implementations behind :class:`ModelRunner`:

* :class:`InterpreterRunner` - the TFLite ``Interpreter`` (backends ``cpu``, ``opencl``, ``gl``): XNNPACK by
  default, plus our native delegate for fused ``Sd*`` ops or for the GPU backends. Exact placement report.
* :class:`CompiledModelRunner` - LiteRT ``CompiledModel`` (``litert-gpu``, ``litert-cpu``). LiteRT only tells
  whether the model is *fully* accelerated, so placement is coarse.

Inputs are checked against the model's signature (names, shapes, dtypes) before running, so a mistake is
a one-line :class:`SdliteError` rather than a native crash or a silent resize.
"""
from __future__ import annotations

import contextlib
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from sdlite._native_stderr import CapturedLog, StderrTrap, capture_native_stderr
from sdlite.backends import DELEGATE_NAME, BackendOptions, load_native_delegate
from sdlite.errors import BackendUnavailableError, SdliteError
from sdlite.placement import Placement, interpreter_placement
from sdlite.model_check import validate_model
from sdlite.tflite_info import ModelInfo

XNNPACK_EXECUTOR = "xnnpack"
_T = TypeVar("_T")


@dataclass(frozen=True)
class IOSpec:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


class ModelRunner(ABC):
    """A loaded model. ``run(**inputs)`` returns ``{output name: array}``; ``last_invoke_s`` times the run."""

    def __init__(self, path: Path, options: BackendOptions, info: ModelInfo) -> None:
        self.path = path
        self.options = options
        self.info = info
        self.inputs: dict[str, IOSpec] = {}
        self.outputs: dict[str, IOSpec] = {}
        self.placement = Placement(options.name)
        self.last_invoke_s = 0.0
        self.load_s = 0.0  # creating the interpreter (our delegate's partitioning and prepare included)
        self.delegate_s = 0.0  # creating our delegate (OpenCL / GL context; kernels are built at the first call)
        self.calls = 0
        self.first_call_s: float | None = None  # the first run(): the delegate's one-time set-up happens there
        self.second_call_s: float | None = None
        self.released_stats: dict[str, object] | None = None  # the delegate's last stats, kept by release()
        self._trap: StderrTrap | None = None  # fd 2 held back around native calls (_native_call)
        self._trap_stderr = True  # off during warm_up (another thread may hold fd 2)
        self.warmed_up = False  # the first call was warm_up()'s, on zero inputs
        self._summary: tuple[Placement, str] | None = None  # placement_summary() of that placement

    @property
    def backend(self) -> str:
        return self.options.name

    def placement_summary(self) -> str:
        """:meth:`Placement.summary` of this model, made once per placement (a walk over every op: milliseconds for
        a UNet, and every generated image reports it)."""
        if self._summary is None or self._summary[0] is not self.placement:
            self._summary = (self.placement, self.placement.summary(self.info))
        return self._summary[1]

    def check_inputs(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Validated, contiguous, correctly typed copies/views of ``feeds``."""
        missing = [n for n in self.inputs if n not in feeds]
        extra = [n for n in feeds if n not in self.inputs]
        if missing or extra:
            raise SdliteError(
                f"{self.path.name}: inputs are {sorted(self.inputs)}; missing {missing}, unexpected {extra}"
            )
        out = {}
        for name, spec in self.inputs.items():
            arr = np.asarray(feeds[name])
            if tuple(arr.shape) != spec.shape:
                raise SdliteError(f"{self.path.name}: input {name!r} must have shape {spec.shape}, got {arr.shape}")
            if arr.dtype != spec.dtype:
                if arr.dtype.kind != spec.dtype.kind:
                    raise SdliteError(f"{self.path.name}: input {name!r} must be {spec.dtype}, got {arr.dtype}")
                arr = arr.astype(spec.dtype)
            out[name] = np.ascontiguousarray(arr)
        return out

    def run(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        self.set_inputs(feeds)
        self._timed_invoke()
        return self.get_outputs()

    def _timed_invoke(self, progress_fd: int | None = None) -> None:
        t0 = time.perf_counter()
        delegate = self.setup_delegate() if self.calls == 0 and self.options.progress else None
        if delegate is not None:
            from sdlite.setup_monitor import SetupMonitor

            with SetupMonitor(delegate, self.path.stem, fd=progress_fd):
                self.invoke()
        else:
            self.invoke()
        self._count_call(time.perf_counter() - t0)

    def _count_call(self, invoke_s: float) -> None:
        self.last_invoke_s = invoke_s
        if self.calls == 0:
            self.first_call_s = invoke_s
        elif self.calls == 1:
            self.second_call_s = invoke_s
        self.calls += 1

    def warm_up(self, progress_fd: int | None = None) -> None:
        """The first inference, on zero inputs, when nothing ran yet and our GPU delegate runs the model: its one-time
        set-up (kernels, weights, tile tuning) happens now, and the first real call runs at steady speed. Meant for a
        thread of its own beside other models' (LiteRT releases the GIL while it invokes; Interpreter.warm_up), so
        what native code prints is not held back here: fd 2 belongs to the whole process, and the caller holds it for
        all threads at once. ``progress_fd``: where the set-up's progress bar goes (a copy of the terminal's fd 2)."""
        if not self.needs_warm_up:
            return
        self._trap_stderr = False
        try:
            self.set_inputs({name: np.zeros(spec.shape, spec.dtype) for name, spec in self.inputs.items()})
            self._timed_invoke(progress_fd)
        finally:
            self._trap_stderr = True
        self.warmed_up = True

    @property
    def needs_warm_up(self) -> bool:
        """Nothing ran yet and our GPU delegate runs the model: its first inference carries a one-time set-up."""
        return self.calls == 0 and self.setup_delegate() is not None

    def setup_delegate(self) -> object | None:
        """Our GPU delegate (backends opencl / gl), whose stats describe its one-time set-up; else None."""
        return None

    def delegate_stats(self) -> dict[str, object] | None:
        """The stats of :meth:`setup_delegate` (set-up phases, persistent-cache hits and misses), or None; after
        :meth:`release`, the stats it had then."""
        delegate = self.setup_delegate()
        if delegate is None:
            return self.released_stats
        from sdlite import native

        return native.stats(delegate)

    def _native_call(self, what: str | Callable[[], str], call: Callable[[], _T]) -> _T:
        """``call()`` with what native code prints on fd 2 held back: replayed on success, one line of
        :class:`SdliteError` on failure (the runtime's exception text and our delegate's log, never a trace).
        ``what`` names the call in that line (a callable: asked after the failure, for calls of several stages)."""
        if self._trap is None:
            self._trap = StderrTrap()
        with self._trap() if self._trap_stderr else contextlib.nullcontext(CapturedLog()) as log:
            try:
                result: Any = call()
                failure = None
            except (RuntimeError, ValueError, IndexError, KeyError) as exc:
                failure = str(exc).strip() or type(exc).__name__
        if failure is not None:
            label = what() if callable(what) else what
            raise SdliteError(f"{self.path.name} on backend {self.backend}: {label} failed: {log.summary(failure)}")
        if log.text:
            sys.stderr.write(log.text)
        return result

    @abstractmethod
    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None: ...

    @abstractmethod
    def invoke(self) -> None: ...

    @abstractmethod
    def get_outputs(self) -> dict[str, np.ndarray]: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release native resources (idempotent)."""

    def gpu_bytes(self, stats: dict[str, object] | None = None) -> int | None:
        """GPU memory our delegate holds for this model: its device weights plus its arena (every intermediate
        tensor and op scratch), from the delegate's own accounting (``stats``: :meth:`delegate_stats` already read);
        None off our GPU backends."""
        if stats is None:
            stats = self.delegate_stats()
        if not stats:
            return None
        return int(stats.get("device_weight_bytes", 0)) + int(stats.get("max_arena_bytes", 0))

    def release(self) -> None:
        """:meth:`close`, keeping the delegate's last stats (timings and memory stay readable)."""
        if self.released_stats is None:
            self.released_stats = self.delegate_stats()
        self.close()


class InterpreterRunner(ModelRunner):
    def __init__(self, path: Path, options: BackendOptions, info: ModelInfo, signature: str,
                 content: bytes | None = None) -> None:
        super().__init__(path, options, info)
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        delegates = []
        t0 = time.perf_counter()
        if options.name == "cpu" and info.fused_ops:
            context = f"{path.name}: model has fused ops ({', '.join(info.fused_ops)}); "
            delegates.append(load_native_delegate(options, "cpu", context))
        elif options.name in ("opencl", "gl"):
            delegates.append(load_native_delegate(options, options.name, f"backend {options.name} unavailable: "))
        self.delegate_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with capture_native_stderr(options.verbose) as log:
            try:
                source = {"model_content": content} if content is not None else {"model_path": str(path)}
                resolver = (OpResolverType.AUTO if options.use_xnnpack
                            else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
                self._interp = Interpreter(
                    **source, experimental_delegates=delegates or None, num_threads=options.threads,
                    experimental_op_resolver_type=resolver,
                )
                wrapper = self._interp._interpreter  # node-level API (no public equivalent)
                after_ours = wrapper.NumNodes()
                # Through the wrapper: the public allocate_tensors() refuses while we hold `wrapper`.
                wrapper.AllocateTensors()  # applies XNNPACK (lazily, after our delegate)
                after_xnnpack = wrapper.NumNodes()
            except (ValueError, RuntimeError) as exc:
                failure: str | None = str(exc).strip()  # keep only text: frees native objects while captured
            else:
                failure = None
        if failure is not None:
            raise SdliteError(f"cannot load {path.name} on backend {options.name}: {log.summary(failure)}")
        self.load_s = time.perf_counter() - t0
        self._delegates = delegates
        boundaries = []
        if delegates:
            boundaries.append((DELEGATE_NAME, after_ours))
        if options.use_xnnpack:
            boundaries.append((XNNPACK_EXECUTOR, after_xnnpack))
        self.placement = interpreter_placement(options.name, info, wrapper, boundaries)

        sigs = self._interp.get_signature_list()
        if signature not in sigs:
            raise SdliteError(f"{path.name} has no signature {signature!r} (has {sorted(sigs)})")
        self._wrapper = wrapper
        self._native_call("reading the signature", lambda: self._read_signature(signature))

    def _read_signature(self, signature: str) -> None:
        runner = self._interp.get_signature_runner(signature)
        self._in_index = {}
        for name, d in runner.get_input_details().items():
            self.inputs[name] = IOSpec(name, tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]))
            self._in_index[name] = int(d["index"])
        self._out_index = {}
        for name, d in runner.get_output_details().items():
            self.outputs[name] = IOSpec(name, tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]))
            self._out_index[name] = int(d["index"])
        self._subgraph = self._wrapper.GetSubgraphIndexFromSignature(signature)

    def setup_delegate(self) -> object | None:
        return self._delegates[0] if self.options.name in ("opencl", "gl") and self._delegates else None

    def run(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        """As :meth:`ModelRunner.run`, with fd 2 held back once around setting the inputs, the inference and reading
        the outputs instead of once each (the denoising loop makes this call twenty and more times an image)."""
        if self.calls == 0:  # the first call may carry the delegate's set-up, with its progress monitor
            return super().run(**feeds)
        checked = self.check_inputs(feeds)
        stage = "setting the inputs"

        def run_all() -> dict[str, np.ndarray]:
            nonlocal stage
            self._set_tensors(checked)
            stage = "inference"
            t0 = time.perf_counter()
            self._wrapper.Invoke(self._subgraph)
            self._count_call(time.perf_counter() - t0)
            stage = "reading the outputs"
            return self._output_tensors()

        return self._native_call(lambda: stage, run_all)

    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        checked = self.check_inputs(feeds)
        self._native_call("setting the inputs", lambda: self._set_tensors(checked))

    def invoke(self) -> None:
        self._native_call("inference", lambda: self._wrapper.Invoke(self._subgraph))

    def get_outputs(self) -> dict[str, np.ndarray]:
        return self._native_call("reading the outputs", self._output_tensors)

    def _set_tensors(self, checked: dict[str, np.ndarray]) -> None:
        for name, arr in checked.items():
            self._wrapper.SetTensor(self._in_index[name], arr, self._subgraph)

    def _output_tensors(self) -> dict[str, np.ndarray]:
        return {name: self._wrapper.GetTensor(i, self._subgraph) for name, i in self._out_index.items()}

    def close(self) -> None:
        self._interp = None  # type: ignore[assignment]
        self._wrapper = None
        self._delegates = []


class CompiledModelRunner(ModelRunner):
    def __init__(self, path: Path, options: BackendOptions, info: ModelInfo, signature: str,
                 content: bytes | None = None) -> None:
        super().__init__(path, options, info)
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import CpuOptions, GpuOptions, Options

        if info.fused_ops:
            raise BackendUnavailableError(
                f"backend {options.name} cannot run the fused ops of {path.name} ({', '.join(info.fused_ops)}); "
                "use backend cpu/opencl/gl or an unfused conversion"
            )
        gpu = options.name == "litert-gpu"
        self._gpu = gpu
        self._last_outputs: dict[str, np.ndarray] = {}
        accel = HardwareAccelerator.GPU | HardwareAccelerator.CPU if gpu else HardwareAccelerator.CPU
        opts = Options(
            hardware_accelerators=accel,
            cpu_options=CpuOptions(num_threads=options.threads),
            gpu_options=GpuOptions(enforce_f32=not options.allow_fp16) if gpu else None,
        )
        t0 = time.perf_counter()
        with capture_native_stderr(options.verbose) as log:
            try:
                if content is not None:
                    self._model = CompiledModel.from_buffer(content, options=opts)
                else:
                    self._model = CompiledModel.from_file(str(path), options=opts)
            except (RuntimeError, ValueError) as exc:
                failure: str | None = str(exc).strip()  # keep only text: LiteRT's env is freed while captured
            else:
                failure = None
        if failure is not None:
            what = "LiteRT GPU accelerator could not be created" if gpu else "LiteRT could not compile the model"
            raise BackendUnavailableError(f"backend {options.name} unavailable: {what}: {log.summary(failure)}")
        self.load_s = time.perf_counter() - t0
        if signature not in self._model.get_signature_list():
            raise SdliteError(f"{path.name} has no signature {signature!r}")
        self._signature = signature
        for name, d in self._model.get_input_tensor_details(signature).items():
            self.inputs[name] = IOSpec(name, tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]))
        for name, d in self._model.get_output_tensor_details(signature).items():
            self.outputs[name] = IOSpec(name, tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]))
        index = self._model.get_signature_index(signature)
        names = self._model.get_signature_list()[signature]
        with capture_native_stderr(options.verbose):  # the first buffer write creates LiteRT's global env
            self._in_bufs = dict(zip(names["inputs"], self._model.create_input_buffers(index)))
            self._out_bufs = dict(zip(names["outputs"], self._model.create_output_buffers(index)))
            for name, buf in self._in_bufs.items():
                buf.write(np.zeros(self.inputs[name].shape, self.inputs[name].dtype))
        full = self._model.is_fully_accelerated()
        executor = "litert-gpu" if gpu else "litert-xnnpack"
        self.placement = Placement(
            backend=options.name,
            note=f"{executor}, fully accelerated: {'yes' if full else 'no (some ops on CPU fallback)'}; "
            "CompiledModel does not report per-op placement",
        )

    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        checked = self.check_inputs(feeds)

        def write_all() -> None:
            for name, arr in checked.items():
                self._in_bufs[name].write(arr)

        self._native_call("setting the inputs", write_all)

    def invoke(self) -> None:
        self._native_call("inference", lambda: self._model.run_by_name(self._signature, self._in_bufs, self._out_bufs))
        if self._gpu:
            # The GPU accelerator may return before the work is done: reading the outputs back synchronises,
            # so timings of invoke() include the GPU work (as our delegate's blocking read does).
            self._last_outputs = self.get_outputs()

    def get_outputs(self) -> dict[str, np.ndarray]:
        def read_all() -> dict[str, np.ndarray]:
            out = {}
            for name, spec in self.outputs.items():
                n = int(np.prod(spec.shape, dtype=np.int64))
                out[name] = self._out_bufs[name].read(n, spec.dtype).reshape(spec.shape)
            return out

        return self._native_call("reading the outputs", read_all)

    def close(self) -> None:
        self._in_bufs, self._out_bufs = {}, {}
        if getattr(self, "_model", None) is not None:
            with capture_native_stderr(self.options.verbose):  # LiteRT logs accelerator teardown on fd 2
                self._model.close()
                self._model = None


def open_runner(path: Path, options: BackendOptions | None = None, signature: str = "serving_default",
                content: bytes | None = None) -> ModelRunner:
    """Load the .tflite at ``path`` (or the in-memory ``content``, ``path`` then only names it) on
    ``options.name``; one-line errors for missing files, invalid models (:mod:`sdlite.model_check`, before the
    runtime sees the file) and unavailable backends."""
    options = options or BackendOptions()
    label = Path(path).name
    info = validate_model(content=content, label=label) if content is not None else validate_model(path, label=label)
    cls = CompiledModelRunner if options.name.startswith("litert-") else InterpreterRunner
    return cls(Path(path), options, info, signature, content)
