"""Which executor ran each op of a model: XNNPACK, our native delegate, or TFLite's builtin CPU kernels.

The TFLite Python API exposes no execution plan, but it does expose every node, including the kernel
nodes delegates append after the model's own ops. Delegates are applied in a known order (ours in the
constructor, XNNPACK lazily at the first allocation), so node-count snapshots tell whose kernels are whose,
and each delegate kernel's ops are recovered by walking producers back from its outputs to its inputs.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sdlite.tflite_info import ModelInfo

BUILTIN_EXECUTOR = "tflite-cpu"


@dataclass(frozen=True)
class Placement:
    """Per-op executor of one model on one backend."""

    backend: str
    node_executor: tuple[str, ...] = ()  # executor of op i of the model (empty when unknown)
    partitions: dict[str, int] = field(default_factory=dict)  # executor -> number of delegate kernels
    note: str = ""

    def ops_by_executor(self, info: ModelInfo) -> dict[str, Counter]:
        out: dict[str, Counter] = {}
        for op, ex in zip(info.ops, self.node_executor):
            out.setdefault(ex, Counter())[op.op_name] += 1
        return out

    def summary(self, info: ModelInfo) -> str:
        """One line: ``xnnpack: 1309 ops in 24 partitions; tflite-cpu: 24 ops (SLICE 14, SIN 1, ...)``."""
        if not self.node_executor:
            return f"{self.backend}: {self.note}" if self.note else f"{self.backend}: placement unknown"
        parts = []
        for ex, ops in sorted(self.ops_by_executor(info).items(), key=lambda kv: -sum(kv[1].values())):
            n = sum(ops.values())
            text = f"{ex}: {n} ops"
            if ex in self.partitions:
                text += f" in {self.partitions[ex]} partition{'s' if self.partitions[ex] != 1 else ''}"
            if ex == BUILTIN_EXECUTOR or n <= 3:
                text += " (" + ", ".join(f"{k} {v}" for k, v in ops.most_common(6)) + ")"
            parts.append(text)
        return "; ".join(parts) + (f" [{self.note}]" if self.note else "")


def covered_ops(info: ModelInfo, kernel_inputs: set[int], kernel_outputs: list[int]) -> set[int]:
    """Indices of the model ops a delegate kernel replaced (its producers between outputs and inputs)."""
    producer = {t: op.index for op in info.ops for t in op.outputs if t >= 0}
    seen: set[int] = set()
    stack = [t for t in kernel_outputs if t >= 0]
    visited_tensors: set[int] = set()
    while stack:
        t = stack.pop()
        if t in visited_tensors or t in kernel_inputs:
            continue
        visited_tensors.add(t)
        p = producer.get(t)
        if p is None or p in seen:
            continue
        seen.add(p)
        stack.extend(x for x in info.ops[p].inputs if x >= 0)
    return seen


def interpreter_placement(
    backend: str, info: ModelInfo, wrapper, boundaries: list[tuple[str, int]]
) -> Placement:
    """Placement from a TFLite interpreter ``wrapper`` (``Interpreter._interpreter``).

    ``boundaries`` lists ``(executor, node_count_after_it_was_applied)`` in application order; nodes beyond
    the model's own ops up to each count belong to that executor.
    """
    n_ops = len(info.ops)
    executor = [BUILTIN_EXECUTOR] * n_ops
    partitions: dict[str, int] = {}
    start = n_ops
    for name, end in boundaries:
        for node in range(start, end):
            ins = {int(t) for t in wrapper.NodeInputs(node)}
            outs = [int(t) for t in wrapper.NodeOutputs(node)]
            for op in covered_ops(info, ins, outs):
                executor[op] = name
            partitions[name] = partitions.get(name, 0) + 1
        start = max(start, end)
    return Placement(backend=backend, node_executor=tuple(executor), partitions=partitions)
