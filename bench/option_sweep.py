"""Time models under our delegate for several values of ONE delegate option, side by side in one process.

    python3 -m bench.option_sweep --lib .h200/lib/libsdgpu_delegate.so \
        --option weights_fp16=0,1 /tmp/h200-work/models/unet_b1/plain.tflite ...

Each (model, value) gets a fresh interpreter with ``{"backend": BACKEND, KEY: value}``; the timing is the wall time of
``invoke()`` (which ends with the delegate's blocking read of the outputs, so the GPU work is included), median over
``--runs`` after ``--warmup`` runs, the values interleaved round-robin so drift hits them alike. Every value gets the
same random inputs; with ``--reference-backend cpu`` the model also runs once on that backend of the same library, or
with ``--reference-model plain.tflite`` that model runs once on LiteRT's own CPU kernels (XNNPACK, all cores; the kit's
parity reference: the unfused export of the same weights, inputs matched by name), and each value's outputs are
compared with it (max |out - ref| over max |ref|, the worst output). Each value's delegate stats after its first
invoke give the arena and device weight bytes and the partition count (sdlite.native.stats on ``--lib``). Writes a JSON and a
markdown table to ``--out`` and prints the table. (BENCHMARKS' ``opencl_flush_every`` sweep ran with commit 124a2e7, which
had that option; it was dropped after the sweep showed no effect.)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--option", required=True, help="KEY=v1,v2,... (the first value is the ratio baseline)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="round-robin rounds over the values")
    ap.add_argument("--reference-backend", default="", help="e.g. cpu: parity of every value against that backend")
    ap.add_argument("--reference-model", type=Path, default=None,
                    help="parity against this model (one model only) on LiteRT's CPU kernels, no delegate")
    ap.add_argument("--out", type=Path, default=Path("option-sweep"))
    args = ap.parse_args()
    os.environ["SDLITE_DELEGATE_PATH"] = str(Path(args.lib).resolve())  # sdlite.native.stats reads this library
    from ai_edge_litert.interpreter import Interpreter, load_delegate

    from sdlite import native
    from sdlite.tflite_info import read_model_info

    key, _, values_text = args.option.partition("=")
    values = [v for v in values_text.split(",") if v]
    if not key or not values:
        raise SystemExit("--option wants KEY=v1,v2,...")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, list[float]]] = {}
    errors: dict[str, dict[str, float]] = {}
    memory: dict[str, dict[str, dict[str, int]]] = {}

    def feed(it, inputs: dict[str, np.ndarray]) -> None:
        """``inputs`` by tensor name (the position where a name differs, e.g. another export's reference model)."""
        it.allocate_tensors()
        ordered = list(inputs.values())
        for k, d in enumerate(it.get_input_details()):
            it.set_tensor(d["index"], inputs.get(d["name"], ordered[k]))
        it.invoke()

    def run_once(model: Path, options: dict, inputs: dict[str, np.ndarray], record: str = ""):
        delegate = load_delegate(args.lib, options)
        it = Interpreter(model_path=str(model), experimental_delegates=[delegate])
        feed(it, inputs)
        if record:
            st = native.stats(delegate)
            memory.setdefault(str(model), {})[record] = {
                k: int(st.get(k, -1)) for k in ("max_arena_bytes", "device_weight_bytes", "partitions")}
        it._sweep_delegate = delegate  # noqa: SLF001 - kept alive with its interpreter
        return it

    def outputs(it) -> list[np.ndarray]:
        return [it.get_tensor(d["index"]).astype(np.float64) for d in it.get_output_details()]

    for model in args.models:
        rng = np.random.default_rng(0)
        info = read_model_info(model)
        inputs = {info.tensors[i].name: rng.standard_normal(info.tensors[i].shape).astype(info.tensors[i].dtype)
                  for i in info.inputs}
        ref = outputs(run_once(model, {"backend": args.reference_backend}, inputs)) if args.reference_backend else None
        if args.reference_model is not None:
            cpu = Interpreter(model_path=str(args.reference_model), num_threads=os.cpu_count() or 1)
            feed(cpu, inputs)
            ref = outputs(cpu)
        interps = {}
        for v in values:
            it = run_once(model, {"backend": args.backend, key: v}, inputs, record=v)
            if ref is not None:
                errors.setdefault(str(model), {})[v] = max(
                    float(np.abs(o - r).max() / max(np.abs(r).max(), 1e-30)) for o, r in zip(outputs(it), ref))
            for _ in range(args.warmup - 1):
                it.invoke()
            interps[v] = it
        times: dict[str, list[float]] = {v: [] for v in values}
        per_round = max(1, args.runs // args.rounds)
        for _ in range(args.rounds):
            for v, it in interps.items():
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    it.invoke()
                    times[v].append((time.perf_counter() - t0) * 1e3)
        results[str(model)] = times
        del interps
    ref_name = args.reference_backend or (f"{args.reference_model.name} on XNNPACK" if args.reference_model else "")
    err_head = f" max rel err vs {ref_name} |" if ref_name else ""
    lines = [f"| model | {key} | median ms | min ms | ratio to {key}={values[0]} | arena MB | GPU weights MB | "
             f"partitions |{err_head}",
             "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if err_head else "")]
    for model, times in results.items():
        base = statistics.median(times[values[0]])
        for v in values:
            med = statistics.median(times[v])
            err = f" {errors[model][v]:.1e} |" if err_head else ""
            mem = memory.get(model, {}).get(v, {})
            mb = {k: f"{mem[k] / 2**20:.1f}" if mem.get(k, -1) >= 0 else "-"
                  for k in ("max_arena_bytes", "device_weight_bytes")}
            lines.append(f"| {Path(model).parent.name}/{Path(model).name} | {v} | {med:.2f} | {min(times[v]):.2f} | "
                         f"{med / base:.3f} | {mb['max_arena_bytes']} | {mb['device_weight_bytes']} | "
                         f"{mem.get('partitions', '-')} |{err}")
    table = "\n".join(lines)
    (args.out / "option_sweep.json").write_text(json.dumps({"option": key, "values": values, "ms": results,
                                                            "max_rel_err": errors, "memory": memory}, indent=1))
    (args.out / "option_sweep.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
