"""``sdconvert inspect FILE|FOLDER``: op histogram, signatures and the fused ``Sd*`` ops (with decoded attrs) of a
.tflite, or of every .tflite in a folder (a conversion's output).

Exit status: 0 = fine; 1 = the model parsed but a fused op has options that do not decode or validate (each such op
is listed with the reason); 2 = the file cannot be read as a .tflite, or bad usage. Malformed input never produces a
traceback: parsing is pure Python (flatbuffers object API over an mmap), every failure becomes one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

PROG = "sdconvert inspect"


def _shape(t: Any) -> list[int] | None:
    return None if t is None or t.shape is None else [int(d) for d in t.shape]


def _registry() -> dict[str, Any]:
    """All fused-op definitions, including ones kept outside ``sdconvert.ops.REGISTRY`` (the Winograd conv)."""
    import importlib

    from .ops import REGISTRY

    reg = dict(REGISTRY)
    for module in ("conv2d_winograd",):
        try:
            spec = importlib.import_module(f"sdconvert.ops.{module}").SPEC
        except (ImportError, AttributeError):
            continue
        reg.setdefault(spec.name, spec)
    return reg


def describe(path: Path) -> dict[str, Any]:
    """Everything ``inspect`` prints, as a dict. Raises ``ModelFormatError`` for unreadable files."""
    from .graph.io import read_model
    from .ops import OpAttrError

    registry = _registry()
    model = read_model(path)
    fused: list[dict[str, Any]] = []
    invalid = 0
    for gi, sg in enumerate(model.subgraphs):
        for oi, op in enumerate(sg.ops):
            if not op.is_custom or not op.type.startswith("Sd"):
                continue
            entry: dict[str, Any] = {
                "subgraph": gi,
                "index": oi,
                "op": op.type,
                "version": op.opcode.version,
                "inputs": [_shape(t) for t in op.inputs],
                "outputs": [_shape(t) for t in op.outputs],
            }
            spec = registry.get(op.type)
            if spec is None:
                entry["error"] = "unknown fused op (no definition in sdconvert.ops)"
            elif op.opcode.version != spec.version:
                entry["error"] = f"version {op.opcode.version}, this sdconvert knows version {spec.version}"
            elif op.custom_options is None:
                entry["error"] = "no custom options"
            else:
                try:
                    entry["attrs"] = dict(vars(spec.decode(op.custom_options)))
                except OpAttrError as e:
                    entry["error"] = str(e)
                except Exception as e:  # noqa: BLE001 - a decoder bug must not crash inspect
                    entry["error"] = f"options could not be decoded ({type(e).__name__})"
                else:
                    if len(op.inputs) != spec.num_inputs:
                        entry["error"] = f"{len(op.inputs)} inputs, expected {spec.num_inputs}"
            if "error" in entry:
                invalid += 1
            fused.append(entry)
    sigs = [
        {
            "key": s.key,
            "inputs": [{"name": n, "shape": _shape(t)} for n, t in s.inputs],
            "outputs": [{"name": n, "shape": _shape(t)} for n, t in s.outputs],
        }
        for s in model.signatures
    ]
    return {
        "file": str(path),
        "bytes": path.stat().st_size,
        "subgraphs": len(model.subgraphs),
        "num_ops": model.num_ops(),
        "histogram": model.op_histogram(),
        "signatures": sigs,
        "fused": fused,
        "invalid_fused": invalid,
    }


def _fmt_attrs(attrs: dict[str, Any]) -> str:
    def v(x: Any) -> str:
        if isinstance(x, bool):
            return "true" if x else "false"
        if isinstance(x, float):
            return f"{x:.6g}"
        return str(x)

    return " ".join(f"{k}={v(x)}" for k, x in attrs.items())


def render(info: dict[str, Any], out: TextIO) -> None:
    w = out.write
    w(f"{info['file']}: {info['bytes']:,} bytes, {info['subgraphs']} subgraph(s), {info['num_ops']} ops\n")
    for s in info["signatures"]:
        ins = ", ".join(f"{i['name']}{i['shape']}" for i in s["inputs"])
        outs = ", ".join(f"{o['name']}{o['shape']}" for o in s["outputs"])
        w(f"signature {s['key']}: {ins} -> {outs}\n")
    w("\nop histogram:\n")
    for name, n in info["histogram"].items():
        w(f"  {name:<28}{n:>6}\n")
    w(f"\nfused ops ({len(info['fused'])}):\n")
    if not info["fused"]:
        w("  (none)\n")
    for f in info["fused"]:
        shapes = " ".join("x".join(map(str, s)) if s is not None else "-" for s in f["inputs"])
        outs = " ".join("x".join(map(str, s)) if s is not None else "-" for s in f["outputs"])
        detail = _fmt_attrs(f["attrs"]) if "attrs" in f else f"INVALID: {f['error']}"
        w(f"  [{f['subgraph']}:{f['index']}] {f['op']} {detail}  ({shapes} -> {outs})\n")


def model_files(target: Path) -> list[Path]:
    """``target`` itself, or the .tflite files of the folder ``target`` (sorted); ``ModelFormatError`` otherwise."""
    from .graph.io import ModelFormatError

    if target.is_dir():
        files = sorted(p for p in target.glob("*.tflite") if p.is_file())
        if not files:
            raise ModelFormatError(f"{target}: folder has no .tflite files")
        return files
    if not target.is_file():
        raise ModelFormatError(f"{target}: no such file or folder")
    return [target]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Show the op histogram and fused Sd* ops of a .tflite, or "
                                                            "of every .tflite in a folder.")
    parser.add_argument("file", type=Path, help=".tflite model, or a folder of them (e.g. a conversion's output)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as e:  # argparse already printed usage
        return 2 if e.code else 0
    from .graph.io import ModelFormatError

    infos = []
    current = args.file
    try:
        files = model_files(args.file)
        for path in files:
            current = path
            infos.append(describe(path))
    except ModelFormatError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - malformed input must end in one line and exit 2, never a traceback
        print(f"{PROG}: error: {current}: unreadable model ({type(e).__name__})", file=sys.stderr)
        return 2
    invalid = sum(info["invalid_fused"] for info in infos)
    if args.json:
        data = infos[0] if not args.file.is_dir() else {"folder": str(args.file), "models": infos,
                                                         "invalid_fused": invalid}
        json.dump(data, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for i, info in enumerate(infos):
            if i:
                sys.stdout.write("\n")
            render(info, sys.stdout)
    if invalid:
        print(f"{PROG}: {invalid} fused op(s) with invalid options", file=sys.stderr)
        return 1
    return 0


__all__ = ["describe", "main", "model_files", "render"]
