"""``sdconvert optimize IN -o OUT``: a conversion's graph stages (``--fuse``, ``--winograd``) on an existing export.

``IN`` is a .tflite file or a folder written by ``sdconvert`` (with ``manifest.json``). For a file, ``OUT`` is the
optimized .tflite. For a folder, ``OUT`` is a new folder: every model listed in the manifest optimized, everything
else (tokenizer, scheduler, log) copied, and the manifest updated (model entries, fusion tables, Winograd plans), so
``sdlite generate --model OUT`` runs it as it is. This is how one shipped plain model becomes its fused and
fused+Winograd variants on the target machine, without torch or the original weights.

The output appears only on success (temporary sibling, then rename); it may replace the input itself (in place,
``--overwrite``) but never lie inside it or contain it, and a failed run leaves no folder behind. The stages are the ones ``sdconvert --fuse
--winograd ...`` runs (:func:`sdconvert.export.optimize.optimize`, same flags, same tables), with one difference: a
conversion runs them on the fp32 graph before the weight-precision pass, while here the input may already be fp16/int8.
Fusion still works there, but the Winograd rewrite needs a constant filter, so convs whose weights are DEQUANTIZE
outputs stay direct (the plan table says why). Optimize an fp32 export to get Winograd convs.

``--verify`` runs the per-op check (:mod:`sdconvert.opcheck`): every fused op of the output against the subgraph
of the input it replaced, on the same synthetic inputs, on each ``--verify-backend``; the table is printed (and in
``--json``, and for a folder in the manifest's ``op_errors``). The whole optimized model against the input model must
agree within the fp32 tolerance of ``sdconvert --verify`` (1e-4 relative), else nothing is written and the exit
code is 1.

Exit codes: 0 ok, 1 the optimized model differs from the input beyond tolerance (--verify), 2 user error (one line
on stderr).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from sdconvert.atomic_dir import make_parents, publish_dir, refuse_foreign_folder, refuse_overlap, remove_created
from sdconvert.delegate_timer import DelegateTimer
from sdconvert.errors import ParityError, UserError
from sdlite import json_out
from sdconvert.export.optimize import GraphOptions, add_graph_arguments, format_fusion, optimize
from sdconvert.opcheck.args import add_verify_backend_argument, parse_backends

if TYPE_CHECKING:
    from sdconvert.opcheck.report import OpReport
    from sdlite.tflite_info import ModelInfo

PROG = "sdconvert optimize"
EPILOG = """examples:
  sdconvert optimize out/sd15/unet.tflite --fuse -o out/unet-fused.tflite
  sdconvert optimize out/sd15/unet.tflite --fuse --winograd auto --device-profile h200 -o out/unet-fw.tflite
  sdconvert optimize out/sd15 --fuse --winograd 4 -o out/sd15-fused-wino4
  sdconvert optimize out/sd15/unet.tflite --fuse --winograd auto --verify --verify-backend cpu,opencl,gl -o out/u.tflite
"""


@dataclass
class ModelResult:
    """One optimized model: its output file and what the stages did."""

    name: str
    file: Path
    bytes: int
    num_ops_before: int
    num_ops: int
    fusion: dict[str, Any] | None = None
    winograd: dict[str, Any] | None = None
    winograd_table: str = ""
    op_errors: OpReport | None = None  # --verify: the per-op table

    def as_json(self) -> dict[str, Any]:
        d = {"file": str(self.file), "bytes": self.bytes, "num_ops_before": self.num_ops_before,
             "num_ops": self.num_ops, "fusion": self.fusion, "winograd": self.winograd}
        if self.op_errors is not None:
            d["op_errors"] = self.op_errors.as_dict()
        return d


@dataclass
class OptimizeResult:
    input: Path
    out: Path
    options: GraphOptions
    models: list[ModelResult] = field(default_factory=list)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"input": str(self.input), "out": str(self.out), "options": asdict(self.options),
                "models": {m.name: m.as_json() for m in self.models}, "seconds": round(self.seconds, 3)}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, epilog=EPILOG,
                                 description="Run a conversion's graph stages (--fuse, --winograd) on an existing "
                                             ".tflite or sdconvert output folder.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", type=Path, help="a .tflite model, or a folder written by sdconvert (with manifest.json)")
    ap.add_argument("-o", "--out", type=Path, required=True,
                    help="output .tflite (file input) or folder (folder input)")
    add_graph_arguments(ap)
    ap.add_argument("--verify", action="store_true",
                    help="per-op check: every fused op against the input's subgraph it replaced, on the same inputs; "
                         "exit 1 if the whole optimized model differs from the input beyond 1e-4 relative")
    add_verify_backend_argument(ap)
    ap.add_argument("--overwrite", action="store_true", help="replace an existing output (may be the input itself)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    ap.add_argument("--json", action="store_true", help="print a JSON summary on stdout instead of the tables")
    return ap


def _model_facts(path: Path) -> ModelInfo:
    """``sdlite``'s model validator on ``path`` (:func:`sdlite.model_check.validate_model`: what the runtime would
    refuse is refused here, before any work); any problem becomes a one-line :class:`UserError`."""
    from sdlite.errors import SdliteError
    from sdlite.model_check import validate_model

    try:
        return validate_model(path)
    except SdliteError as e:
        raise UserError(str(e)) from None


def _check_out(out: Path, overwrite: bool, is_dir: bool) -> None:
    if out.exists() and not overwrite:
        raise UserError(f"output {out} already exists; pass --overwrite to replace it")
    if out.exists() and out.is_dir() != is_dir:
        raise UserError(f"output {out} is a {'folder' if out.is_dir() else 'file'}; "
                        f"give a {'folder' if is_dir else '.tflite file'} path for this input")


def _tmp_sibling(out: Path) -> Path:
    return out.parent / f".{out.name}.tmp-{os.getpid()}"


def _optimize_one(name: str, src: Path, dst: Path, opts: GraphOptions, say: Callable[[str], None],
                  verify: Sequence[str] | None = None) -> ModelResult:
    before = _model_facts(src)
    graph = optimize(src, opts, say, dst=dst)
    after = _model_facts(dst)
    result = ModelResult(name=name, file=dst, bytes=dst.stat().st_size, num_ops_before=len(before.ops),
                         num_ops=len(after.ops), fusion=graph.get("fusion"), winograd=graph.get("winograd"),
                         winograd_table=graph.get("winograd_table", ""))
    if verify:
        from sdconvert.export.verify import TOLERANCE
        from sdconvert.opcheck.run import op_report, synthetic_inputs

        say(f"per-op check of {name} on {', '.join(verify)}")
        result.op_errors = op_report(name, src, dst, synthetic_inputs(src), verify, workdir=dst.parent,
                                     fit_residuals=graph.get("fit_residuals"))
        tol = TOLERANCE["fp32"]
        bad = [(b, k, e) for b, outs in result.op_errors.end_to_end.items() for k, e in outs.items()
               if not e.rel <= tol]  # NaN is over
        if bad:
            raise ParityError(f"{name}: the optimized model differs from {src.name} beyond {tol:g} relative ("
                              + ", ".join(f"{k} on {b}: {e.rel:.2e}" for b, k, e in bad) + "); nothing written\n"
                              + "\n".join(result.op_errors.summary_lines(top=3)))
    return result


def optimize_file(src: Path, out: Path, opts: GraphOptions, *, overwrite: bool = False,
                  say: Callable[[str], None] = lambda _: None, verify: Sequence[str] | None = None) -> OptimizeResult:
    """Optimize one .tflite into ``out`` (atomic: a temporary sibling renamed into place on success)."""
    t0 = time.perf_counter()
    _check_out(out, overwrite, is_dir=False)
    refuse_overlap(out, [src], same_ok=True)
    created: list[Path] = []
    tmp = _tmp_sibling(out)
    ok = False
    try:
        created = make_parents(out)
        model = _optimize_one(src.stem, src, tmp, opts, say, verify)
        os.replace(tmp, out)
        ok = True
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)
        if not ok:
            remove_created(created)
    model.file = out
    return OptimizeResult(src, out, opts, [model], time.perf_counter() - t0)


def optimize_folder(src: Path, out: Path, opts: GraphOptions, *, overwrite: bool = False,
                    say: Callable[[str], None] = lambda _: None, verify: Sequence[str] | None = None) -> OptimizeResult:
    """Optimize every model of an ``sdconvert`` output folder into a new folder with an updated manifest."""
    from sdconvert import manifest as mf

    t0 = time.perf_counter()
    try:
        manifest = mf.read(src)
    except FileNotFoundError:
        raise UserError(f"{src} is not an sdconvert output folder (no manifest.json)") from None
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {src}/manifest.json: {e}") from None
    files = {name: str(entry["file"]) for name, entry in manifest.get("models", {}).items()}
    if not files:
        raise UserError(f"{src}/manifest.json lists no models")
    for f in files.values():
        if Path(f).name != f:  # written as tmp / f: a path must not lead out of the new folder
            raise UserError(f"{src}/manifest.json lists the model file {f!r}, which is not a file name in the folder")
        if not (src / f).is_file():
            raise UserError(f"{src}/manifest.json lists {f}, which is missing")
    _check_out(out, overwrite, is_dir=True)
    refuse_overlap(out, [src], same_ok=True)
    if out.resolve() != src.resolve():
        refuse_foreign_folder(out)
    tmp = _tmp_sibling(out)
    result = OptimizeResult(src, out, opts)
    created: list[Path] = []
    ok = False
    try:
        created = make_parents(out)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, ignore=lambda d, names: [n for n in names if Path(d) == src and n in files.values()])
        for name, f in files.items():
            say(f"optimizing {name}")
            result.models.append(_optimize_one(name, src / f, tmp / f, opts, say, verify))
        for m in result.models:
            manifest["models"][m.name] = mf.model_entry(m.file)
            if m.fusion is not None:
                manifest.setdefault("fusion", {})[m.name] = m.fusion
            if m.winograd is not None:
                manifest.setdefault("winograd", {})[m.name] = m.winograd
            if m.op_errors is not None:
                manifest.setdefault("op_errors", {})[m.name] = m.op_errors.as_dict()
            m.file = out / m.file.name
        # parity in the manifest stays the conversion's (plain model vs torch); this records what changed since
        manifest["optimized"] = {"source": str(src.absolute()), "options": asdict(opts)}
        mf.write(tmp / "manifest.json", manifest)
        publish_dir(tmp, out)
        ok = True
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not ok:
            remove_created(created)
    result.seconds = time.perf_counter() - t0
    return result


def run(src: Path, out: Path, opts: GraphOptions, *, overwrite: bool = False,
        say: Callable[[str], None] = lambda _: None, verify: Sequence[str] | None = None) -> OptimizeResult:
    """Validate the options and input, then :func:`optimize_file` or :func:`optimize_folder`. ``verify``: the
    backends of the per-op check (None: no check)."""
    if not opts.active:
        raise UserError("nothing to do: pass --fuse and/or --winograd {2,4,6,auto}")
    opts.validate()
    if verify is not None:
        verify = parse_backends(",".join(verify))
    if not src.exists():
        raise UserError(f"{src}: no such file or folder")
    if src.is_dir():
        return optimize_folder(src, out, opts, overwrite=overwrite, say=say, verify=verify)
    _model_facts(src)  # a missing TFL3 identifier is a one-line error here, before any work
    return optimize_file(src, out, opts, overwrite=overwrite, say=say, verify=verify)


def render(result: OptimizeResult) -> str:
    """The fusion table(s) and Winograd plan table(s), as ``sdconvert --fuse --winograd`` prints them, plus sizes."""
    blocks = []
    for m in result.models:
        if m.fusion is not None:
            blocks.append(format_fusion(m.name, m.fusion))
        if m.winograd is not None and m.winograd.get("convs"):
            blocks.append(f"{m.name} Winograd plan:\n{m.winograd_table}")
    for m in result.models:
        if m.op_errors is not None:
            blocks.append(m.op_errors.format_table())
    for m in result.models:
        blocks.append(f"  {m.file.name:<22}{m.bytes / 2**20:>9.1f} MiB{m.num_ops_before:>7} -> {m.num_ops} ops")
    blocks.append(f"done in {result.seconds:.1f} s; wrote {result.out}")
    return "\n".join(blocks)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(list(argv) if argv is not None else None)
    except SystemExit as e:  # argparse already printed usage
        return 2 if e.code else 0

    def say(msg: str) -> None:
        if not (args.quiet or args.json):
            print(f"{PROG}: {msg}", file=sys.stderr)

    try:
        if args.verify_backend != "cpu" and not args.verify:
            raise UserError("--verify-backend applies with --verify")
        verify = parse_backends(args.verify_backend) if args.verify else None
        graph = GraphOptions.from_args(args, timer=DelegateTimer() if args.tune else None)
        result = run(args.input, args.out, graph, overwrite=args.overwrite, say=say,
                     verify=verify)
    except UserError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1 if isinstance(e, ParityError) else 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; no output written", file=sys.stderr)
        return 130
    if args.json:
        print(json_out.dumps(result.as_json()))
    elif not args.quiet:
        print(render(result))
    return 0


__all__ = ["ModelResult", "OptimizeResult", "build_parser", "main", "optimize_file", "optimize_folder", "run"]
