"""``--print_preinvoke_state`` / ``--print_postinvoke_state``: the interpreter's tensors and nodes as text.

benchmark_model calls TFLite's ``PrintInterpreterState``; the Python runtime has no such call, so this prints
what it can see, between benchmark_model's begin/end markers: per tensor its id, name, type, bytes, shape and
whether it is a constant (read from the file) or an activation (in the runtime's arena); per node its op and
the executor that runs it (XNNPACK, our delegate, TFLite's builtin kernels), then the delegate kernel nodes the
runtime appended. The stock LiteRT backends (``CompiledModel``) expose no nodes, only their I/O.
"""
from __future__ import annotations

from sdlite.runner import ModelRunner
from sdlite.tflite_info import ModelInfo

MB = float(1 << 20)
NAME_WIDTH = 40


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """``name`` cut in the middle to ``width`` characters (TFLite tensor names run to ~300)."""
    if len(name) <= width:
        return name
    keep = width - 3
    return name[: keep // 3] + "..." + name[-(keep - keep // 3):]


def _io_line(what: str, ids: list[int], info: ModelInfo) -> str:
    total = sum(info.tensors[i].nbytes for i in ids)
    return f"{len(ids)} {what}: {ids} -> {total / MB:.2f}MB"


def state_text(runner: ModelRunner, when: str) -> str:
    """The state block of ``runner`` (``when``: ``pre-invoke`` or ``post-invoke``)."""
    info = runner.info
    lines = [f"====Printing out TfLite interpreter {when} state begins===="]
    wrapper = getattr(runner, "_wrapper", None)  # InterpreterRunner only
    if wrapper is None:
        lines.append(f"backend {runner.backend}: LiteRT's CompiledModel exposes no interpreter state; "
                     f"signature inputs {sorted(runner.inputs)}, outputs {sorted(runner.outputs)}")
    else:
        nodes = wrapper.NumNodes()
        lines += [f"Interpreter has {info.num_subgraphs} subgraphs.", "",
                  f"-----------Subgraph-0 has {len(info.tensors)} tensors and {len(info.ops)} nodes "
                  f"({nodes} after delegation)------------",
                  _io_line("Inputs", list(info.inputs), info), _io_line("Outputs", list(info.outputs), info), "",
                  f"Tensor  ID {'Name':<{NAME_WIDTH}} {'Type':<9} {'Size (Bytes/MB)':>22} {'Shape':<20} Kind"]
        for t in info.tensors:
            kind = "constant" if t.constant else "activation"
            lines.append(f"Tensor {t.index:>3} {short_name(t.name):<{NAME_WIDTH}} {t.dtype:<9} "
                         f"{t.nbytes:>12} / {t.nbytes / MB:>7.2f} {str(list(t.shape)):<20} {kind}")
        lines.append("")
        executors = runner.placement.node_executor or ("?",) * len(info.ops)
        for op, executor in zip(info.ops, executors):
            lines.append(f"Node {op.index:>3} Operator {op.op_name} ({executor}) "
                         f"Inputs {list(op.inputs)} Outputs {list(op.outputs)}")
        for node in range(len(info.ops), nodes):
            lines.append(f"Node {node:>3} Delegate kernel {wrapper.NodeName(node)} "
                         f"Inputs {[int(t) for t in wrapper.NodeInputs(node)]} "
                         f"Outputs {[int(t) for t in wrapper.NodeOutputs(node)]}")
    lines.append(f"====Printing out TfLite interpreter {when} state ends====")
    return "\n".join(lines)
