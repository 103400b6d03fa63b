"""The Winograd tuner's :class:`~sdconvert.winograd.tune.Timer` on this machine: candidate models run by LiteRT with
sdlite's delegate loader, timed by wall clock (CPU backend) or by the delegate's per-node device profile (OpenCL /
GL). The command-line layer passes one to the tuner (``--tune``); the tuner itself imports nothing of the runtime."""
from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class DelegateTimer:
    """Times models through the sdgpu delegate (``sdlite.native.load``)."""

    def invoke_seconds(self, path: Path, x: np.ndarray, repeats: int, warmup: int, num_threads: int | None) -> float:
        from ai_edge_litert.interpreter import Interpreter

        from sdlite import native

        opts = {} if num_threads is None else {"num_threads": num_threads}
        interp = Interpreter(model_path=str(path), experimental_delegates=[native.load(**opts)],
                             num_threads=num_threads or 1)
        interp.allocate_tensors()
        index = interp.get_input_details()[0]["index"]
        times = []
        for i in range(warmup + repeats):
            interp.set_tensor(index, x)
            t0 = time.perf_counter()
            interp.invoke()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def node_device_ms(self, path: Path, backend: str, inputs: Sequence[np.ndarray], repeats: int,
                       warmup: int) -> dict[int, float]:
        from ai_edge_litert.interpreter import Interpreter

        from sdlite import native

        with tempfile.TemporaryDirectory(prefix="sdconvert-tune-") as tmp:
            prof = Path(tmp) / "profile.json"
            delegate = native.load(backend=backend, profile_path=str(prof))
            interp = Interpreter(model_path=str(path), experimental_delegates=[delegate])
            interp.allocate_tensors()
            for d, x in zip(interp.get_input_details(), inputs, strict=True):
                interp.set_tensor(d["index"], x)
            for _ in range(warmup):
                interp.invoke()
            def timed() -> None:
                for _ in range(repeats):
                    interp.invoke()

            avg = native.profile_node_ms(prof, timed)
            del interp, delegate
        return avg
