"""``sdconvert inspect FILE|FOLDER``: op histogram, signatures and the fused ``Sd*`` ops (with decoded attrs) of a
.tflite, or of every .tflite in a folder (a conversion's output).

The file goes through ``sdlite``'s model validator first (:mod:`sdlite.model_check`, what ``sdlite bench`` /
``generate`` run before loading a model): a verified flatbuffer, indices and shapes in bounds, and every fused op judged
by the delegate's own C++ check (version, options, shape rule), so ``inspect`` accepts exactly the fused ops the
runtime claims. Exit status: 0 = fine; 1 = the model is well-formed but a fused op is invalid (each such op is listed
with the reason); 2 = the file is not a valid model (one line: what and where), or bad usage. Malformed input never
produces a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from sdlite import json_out

PROG = "sdconvert inspect"


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


def _python_op_checker() -> Any:
    """The fused-op check without the native library: ``OpSpec.decode`` (which the C++ parsers mirror exactly, see
    tests/native/test_malformed.py) plus version and input count; it cannot apply the ops' shape rules."""
    from .ops import OpAttrError

    registry = _registry()

    def check(name: str, version: int, options: bytes | None, inputs: list, outputs: list) -> tuple[bool, str]:
        spec = registry.get(name)
        if spec is None:
            return False, "unknown Sd* custom op"
        if version != spec.version:
            return False, f"{name}: version {version} is not supported (expected {spec.version})"
        if len(inputs) != spec.num_inputs or len(outputs) != 1:
            return False, (f"{name}: expected {spec.num_inputs} inputs and 1 output, got {len(inputs)} and "
                           f"{len(outputs)}")
        try:
            spec.decode(options or b"")
        except OpAttrError as e:
            return False, str(e)
        return True, ""

    return check


def check(path: Path) -> Any:
    """``sdlite``'s model validator on ``path`` (:func:`sdlite.model_check.check_model`): the fused ops judged by the
    delegate's own C++ check when the library is built (what the runtime does), else by ``OpSpec.decode``."""
    from sdlite.model_check import check_model, native_op_checker

    checker, by = native_op_checker()
    if checker is None:
        checker, by = _python_op_checker(), f"sdconvert.ops, without shape rules ({by})"
    return check_model(path, op_checker=checker, checked_by=by, build=True)


def describe(path: Path) -> dict[str, Any]:
    """Everything ``inspect`` prints, as a dict. Raises ``sdlite.model_check.InvalidModelError`` for a file that is
    not a valid model."""
    registry = _registry()
    result = check(path)
    fused: list[dict[str, Any]] = []
    for f in result.fused:
        entry: dict[str, Any] = {
            "subgraph": f.subgraph,
            "index": f.index,
            "op": f.op,
            "version": f.version,
            "inputs": [list(s) if s is not None else None for s in f.inputs],
            "outputs": [list(s) for s in f.outputs],
        }
        spec = registry.get(f.op)
        if spec is not None and f.options is not None:
            try:
                entry["attrs"] = dict(vars(spec.decode(f.options)))
            except Exception:  # noqa: BLE001 - the op's error says why
                pass
        if f.error is not None:
            entry["error"] = f.error
        fused.append(entry)
    sigs = [
        {
            "key": s.key,
            "inputs": [{"name": n, "shape": list(shape)} for n, shape in s.inputs],
            "outputs": [{"name": n, "shape": list(shape)} for n, shape in s.outputs],
        }
        for s in result.signatures
    ]
    return {
        "file": str(path),
        "bytes": path.stat().st_size,
        "subgraphs": result.info.num_subgraphs,
        "num_ops": result.num_ops,
        "histogram": result.op_histogram,
        "signatures": sigs,
        "fused": fused,
        "invalid_fused": len(result.invalid_fused),
        "fused_checked_by": result.checked_by,
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
        if "error" in f:
            detail = f"INVALID: {f['error']}"
        else:
            detail = _fmt_attrs(f["attrs"]) if "attrs" in f else "(attrs not decoded)"
        w(f"  [{f['subgraph']}:{f['index']}] {f['op']} {detail}  ({shapes} -> {outs})\n")
    if info["fused"]:
        w(f"  (checked by: {info['fused_checked_by']})\n")


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
    from sdlite.errors import SdliteError

    from .graph.io import ModelFormatError

    infos = []
    current = args.file
    try:
        files = model_files(args.file)
        for path in files:
            current = path
            infos.append(describe(path))
    except (ModelFormatError, SdliteError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - malformed input must end in one line and exit 2, never a traceback
        print(f"{PROG}: error: {current}: unreadable model ({type(e).__name__})", file=sys.stderr)
        return 2
    invalid = sum(info["invalid_fused"] for info in infos)
    if args.json:
        data = infos[0] if not args.file.is_dir() else {"folder": str(args.file), "models": infos,
                                                         "invalid_fused": invalid}
        sys.stdout.write(json_out.dumps(data, indent=1) + "\n")
    else:
        for i, info in enumerate(infos):
            if i:
                sys.stdout.write("\n")
            render(info, sys.stdout)
    if invalid:
        info = next(info for info in infos if info["invalid_fused"])
        first = next(f for f in info["fused"] if "error" in f)
        where = f"{info['file']}: " if args.file.is_dir() else ""
        print(f"{PROG}: {invalid} fused op(s) with invalid options; the first, {where}op {first['index']} "
              f"({first['op']}): {first['error']}", file=sys.stderr)
        return 1
    return 0


__all__ = ["describe", "main", "model_files", "render"]
