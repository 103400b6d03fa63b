"""Several OpenCL delegates in one fresh process, for test_opencl_shared_context.py: what a delegate takes from the
process (programs another delegate built) depends on every delegate the process made before, so each scenario gets
a process of its own (the pytest process has made OpenCL delegates of its own by then).

``python shared_context_child.py SCENARIO OUT.npz MODEL[,MODEL...] [key:value ...]``, each MODEL a .tflite whose
inputs are in the .npz of the same stem; the key:value pairs are delegate options. Writes every invoke's outputs to
OUT.npz (``"<delegate>:<output name>"``) and prints one JSON line ``{delegate: stats}``. Delegate ``i`` runs
MODELS[i]. Scenarios:

* ``solo``: one delegate, model 0.
* ``sequential``: delegate 0 loads and runs model 0, then delegate 1 loads and runs model 1.
* ``first_deleted``: delegates 0 and 1 both load their models; 0 runs and is deleted (stats taken before), then 1
  runs; then, with no delegate left, delegate 2 loads and runs model 0 again (a fresh shared state).
* ``threads``: one thread per model, all started together, each creating its delegate and interpreter and invoking
  once; once all have, each invokes three more times while a second wave of threads (delegates len(MODELS) + i,
  one per model again) creates its delegates and invokes four times.
"""
from __future__ import annotations

import gc
import json
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np


class Run:
    """One delegate, its interpreter and its model's inputs."""

    def __init__(self, model: Path, options: dict[str, Any]) -> None:
        from ai_edge_litert.interpreter import Interpreter

        from sdlite import native

        self.delegate = native.load("opencl", **options)
        self.interp = Interpreter(model_path=str(model), experimental_delegates=[self.delegate])
        self.interp.allocate_tensors()
        with np.load(model.with_suffix(".npz")) as feeds:
            for d in self.interp.get_input_details():
                self.interp.set_tensor(d["index"], feeds[d["name"]])

    def invoke(self) -> dict[str, np.ndarray]:
        self.interp.invoke()
        return {d["name"]: self.interp.get_tensor(d["index"]) for d in self.interp.get_output_details()}

    def stats(self) -> dict[str, Any]:
        from sdlite import native

        return native.stats(self.delegate)


def main(argv: list[str]) -> int:
    from sdlite import native

    scenario, out, models_arg, *pairs = argv
    models = [Path(m) for m in models_arg.split(",")]
    options = native.parse_options_text(";".join(pairs))
    outputs: dict[str, np.ndarray] = {}
    stats: dict[str, Any] = {}

    def record(i: int, run: Run, results: dict[str, np.ndarray]) -> None:
        outputs.update({f"{i}:{k}": v for k, v in results.items()})
        stats[str(i)] = run.stats()

    if scenario == "solo":
        run = Run(models[0], options)
        record(0, run, run.invoke())
    elif scenario == "sequential":
        runs = []  # both delegates alive until the end
        for i in range(2):
            runs.append(Run(models[i], options))
            record(i, runs[i], runs[i].invoke())
    elif scenario == "first_deleted":
        first, second = Run(models[0], options), Run(models[1], options)
        record(0, first, first.invoke())
        del first
        gc.collect()
        record(1, second, second.invoke())
        del second
        gc.collect()
        third = Run(models[0], options)
        record(2, third, third.invoke())
    elif scenario == "threads":
        n = len(models)
        start = threading.Barrier(n)
        first_done = threading.Barrier(n + 1)  # the first wave's first invokes, and the main thread
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(i: int, model: Path, wave: int) -> None:
            try:
                if wave == 0:
                    start.wait()
                run = Run(model, options)
                results = [run.invoke()]
                if wave == 0:
                    first_done.wait()
                results += [run.invoke() for _ in range(3)]
                for r in results[1:]:  # every invoke of one delegate gives the same outputs
                    for k in r:
                        np.testing.assert_array_equal(r[k], results[0][k])
                with lock:
                    record(i, run, results[0])
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
                start.abort()
                first_done.abort()

        threads = [threading.Thread(target=work, args=(i, m, 0)) for i, m in enumerate(models)]
        for t in threads:
            t.start()
        try:
            first_done.wait()
        except threading.BrokenBarrierError:
            pass
        else:  # the second wave, created while the first goes on invoking
            second = [threading.Thread(target=work, args=(n + i, m, 1)) for i, m in enumerate(models)]
            for t in second:
                t.start()
            threads += second
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    np.savez(out, **outputs)
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
