"""Per-node timing from the GPU delegate's own device events (backends ``opencl`` / ``gl``).

With the delegate option ``profile_path`` the GPU partition timestamps every kernel launch (OpenCL events;
GL timer queries) and rewrites one JSON file after each invoke::

    {"device": "...", "invocations": K,
     "nodes": [{"node": 12, "op": "CONV_2D", "ms": 0.41, "kernels": [{"name": "conv_t64x64", "ms": 0.41}]}, ...]}

where ``ms`` is the node's device time averaged over all K invocations so far, and ``kernels`` splits it by
kernel name (a Winograd conv's input transform, batched GEMM and output transform; attention's passes). The
benchmark reads that file after the first run, before the timed runs and after them, and recovers averages over
exactly the timed runs by differencing the running sums (``ms_after * K_after - ms_before * K_before``).

What the numbers are, and are not:

* device execution time of each node's kernels (start -> end of the command), with no host overhead: the
  sum over nodes is below the wall time of a run, which also pays input upload, output download and the
  launch/queue overhead of the host;
* a multi-launch node's time is the sum of all its launches, and its ``kernels`` list says which
  kernel took what (the report's "Summary by kernel");
* queue profiling is on for the whole benchmark, so the wall-clock timings printed next to the profile
  include its cost (an event per launch, one ``clFinish`` and a small file write per invoke);
* every partition writes the same file, so with several partitions only the last one's nodes are
  present; nodes without a device time are listed as not timed, never guessed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sdlite.bench.op_profile import OpProfile, OpTiming
from sdlite.errors import SdliteError
from sdlite.placement import Placement
from sdlite.tflite_info import ModelInfo

DEVICE_METHOD = (
    "method: device events - per-node kernel times measured on the device by the delegate (OpenCL events / "
    "GL timer queries), averaged over the timed runs; a multi-launch node sums all its launches"
)
DEVICE_BACKENDS = ("opencl", "gl")


@dataclass(frozen=True)
class ProfileSnapshot:
    """One read of the delegate's profile file: ``{node index: (op name, avg ms)}`` after ``invocations``,
    ``kernels``: ``{node index: {kernel name: avg ms}}`` and ``launches``: ``{node index: {kernel name: launches per
    invocation}}`` (absent from older delegates' files; one launch per listed kernel then)."""

    device: str
    invocations: int
    nodes: dict[int, tuple[str, float]]
    kernels: dict[int, dict[str, float]] = field(default_factory=dict)
    launches: dict[int, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> ProfileSnapshot:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise SdliteError(f"the delegate wrote no profile to {path} (does this backend support profile_path?)")
        except (OSError, ValueError) as exc:
            raise SdliteError(f"unreadable delegate profile {path}: {exc}") from None
        try:
            nodes = {int(n["node"]): (str(n["op"]), float(n["ms"])) for n in data["nodes"]}
            kernels = {int(n["node"]): {str(k["name"]): float(k["ms"]) for k in n.get("kernels", [])}
                       for n in data["nodes"]}
            launches = {int(n["node"]): {str(k["name"]): int(k.get("launches", 1)) for k in n.get("kernels", [])}
                        for n in data["nodes"]}
            return cls(device=str(data.get("device", "")), invocations=int(data["invocations"]), nodes=nodes,
                       kernels=kernels, launches=launches)
        except (KeyError, TypeError, ValueError) as exc:
            raise SdliteError(f"delegate profile {path} has an unexpected format ({exc!r})") from None

    def total_ms(self, node: int) -> float:
        """Device time of ``node`` summed over all invocations so far."""
        return self.nodes[node][1] * self.invocations if node in self.nodes else 0.0


def window_average_ms(before: ProfileSnapshot, after: ProfileSnapshot) -> dict[int, float]:
    """Per-node average device ms over the invocations between two snapshots."""
    runs = _window_runs(before, after)
    return {n: max(after.total_ms(n) - before.total_ms(n), 0.0) / runs for n in after.nodes}


def window_kernel_ms(before: ProfileSnapshot, after: ProfileSnapshot) -> dict[int, dict[str, float]]:
    """Per-node, per-kernel average device ms over the invocations between two snapshots."""
    runs = _window_runs(before, after)
    out: dict[int, dict[str, float]] = {}
    for node, kernels in after.kernels.items():
        old = before.kernels.get(node, {})
        out[node] = {k: max(ms * after.invocations - old.get(k, 0.0) * before.invocations, 0.0) / runs
                     for k, ms in kernels.items()}
    return out


def _window_runs(before: ProfileSnapshot, after: ProfileSnapshot) -> int:
    runs = after.invocations - before.invocations
    if runs <= 0:
        raise SdliteError(f"profile did not advance ({before.invocations} -> {after.invocations} invocations)")
    return runs


def device_op_profile(info: ModelInfo, placement: Placement, first: ProfileSnapshot, before: ProfileSnapshot,
                      after: ProfileSnapshot) -> OpProfile:
    """OpProfile of the nodes the device timed; ``first`` is the snapshot after the first invocation."""
    avg = window_average_ms(before, after)
    kernel_avg = window_kernel_ms(before, after)
    executors = placement.node_executor or tuple(["?"] * len(info.ops))
    prof = OpProfile(method=DEVICE_METHOD, kind="device", device=after.device,
                     runs_averaged=after.invocations - before.invocations)
    for op in info.ops:
        if op.index not in avg:
            where = executors[op.index]
            prof.skipped[op.index] = (f"ran on {where} (no device timing)" if where != "sdgpu"
                                      else "delegated, but absent from the delegate profile")
            continue
        out = [t for t in op.outputs if t >= 0]
        prof.ops.append(OpTiming(
            index=op.index, op_name=op.op_name, executor=executors[op.index],
            first_us=first.nodes.get(op.index, ("", 0.0))[1] * 1e3, avg_us=avg[op.index] * 1e3,
            out_bytes=sum(info.tensors[t].nbytes for t in out),
            name=info.tensors[out[0]].name if out else "",
            kernels=tuple((k, ms * 1e3) for k, ms in kernel_avg.get(op.index, {}).items()),
            kernel_launches=tuple((k, after.launches.get(op.index, {}).get(k, 1))
                                  for k in kernel_avg.get(op.index, {})),
        ))
    return prof
