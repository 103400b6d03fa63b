"""``sdconvert``: convert a Stable Diffusion 1.4/1.5 pipeline to TFLite; ``sdconvert inspect FILE`` to look inside;
``sdconvert optimize IN -o OUT`` to fuse / Winograd-plan an existing .tflite or converted folder.

Exit codes: 0 ok, 1 parity over tolerance, 2 user error (one line on stderr, never a traceback), 141 when the
reader of stdout went away (``sdconvert inspect ... | head``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from sdconvert.delegate_timer import DelegateTimer
from sdconvert.errors import ParityError, UserError
from sdlite import json_out
from sdconvert.export.optimize import add_graph_arguments
from sdconvert.opcheck.args import add_verify_backend_argument, parse_backends

EPILOG = """examples:
  sdconvert --random-weights tiny --verify -o out/tiny
  sdconvert --random-weights tiny --fuse --winograd 4 --verify -o out/tiny-fused
  sdconvert path/to/stable-diffusion-v1-5 --precision fp16 --cfg-batch 2 -o out/sd15
  sdconvert --checkpoint v1-5-pruned-emaonly.safetensors -o out/sd15
  sdconvert inspect out/sd15/unet.tflite
  sdconvert optimize out/sd15/unet.tflite --fuse --winograd auto -o out/unet-fused.tflite
  sdconvert optimize out/sd15 --fuse -o out/sd15-fused
"""


DESCRIPTION = """\
Convert a Stable Diffusion 1.4/1.5 pipeline (diffusers folder, single-file checkpoint or an embedded random-weight
config) to TFLite/LiteRT models for sdlite and the sdgpu delegate.
Subcommands: `sdconvert inspect FILE|FOLDER` shows what is inside a .tflite; `sdconvert optimize IN -o OUT` fuses /
Winograd-plans an existing .tflite or converted folder (see `sdconvert inspect --help`, `sdconvert optimize --help`)."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sdconvert", description=DESCRIPTION, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_argument_group("source (exactly one)")
    src.add_argument("model_dir", nargs="?", type=Path, help="diffusers pipeline folder (with model_index.json)")
    src.add_argument("--checkpoint", type=Path, help="single-file SD 1.x checkpoint (.safetensors; .ckpt needs --allow-pickle)")
    src.add_argument("--allow-pickle", action="store_true", help="allow loading a pickle .ckpt (runs code from the file!)")
    src.add_argument("--ema", action=argparse.BooleanOptionalAction, default=None,
                     help="--checkpoint with LDM's EMA copy (model_ema.*): --ema converts the EMA UNet weights, "
                          "--no-ema the non-EMA ones (default, as diffusers' conversion does)")
    src.add_argument("--random-weights", metavar="CONFIG", help="random weights for an embedded config: sd15 or tiny")
    ap.add_argument("-o", "--out", type=Path, default=None, help="output folder (default: out/<config or name>)")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "int8"), help="weight storage; compute stays fp32")
    ap.add_argument("--height", type=int, help="image height, multiple of 64 (default: the model's, 512 for SD1.5)")
    ap.add_argument("--width", type=int, help="image width, multiple of 64")
    ap.add_argument("--cfg-batch", type=int, default=1, choices=(1, 2), help="UNet batch: 2 runs both CFG branches in one call")
    ap.add_argument("--models", default="text_encoder,unet,vae_decoder,vae_encoder", help="comma list of models to export")
    ap.add_argument("--verify", action="store_true",
                    help="compare each .tflite with torch on random inputs; exit 1 if over tolerance. With --fuse / "
                         "--winograd also a per-op table: every fused op against the unfused graph it replaced")
    add_verify_backend_argument(ap)
    add_graph_arguments(ap)
    ap.add_argument("--seed", type=int, default=0, help="seed for random weights and verify inputs")
    ap.add_argument("--clip-bpe", type=Path, help="CLIP bpe_simple_vocab_16e6.txt.gz (default: ~/.cache/sdconvert)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    return ap


def _default_out(args: argparse.Namespace) -> Path:
    if args.random_weights:
        return Path("out") / args.random_weights
    src = args.model_dir or args.checkpoint
    return Path("out") / (src.stem if src else "model")


def convert_main(argv: Sequence[str]) -> int:
    from sdconvert.export.convert import ConvertOptions, run
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.export.verify import format_table

    args = build_parser().parse_args(argv)
    opts = ConvertOptions(
        out=args.out or _default_out(args), random_weights=args.random_weights, model_dir=args.model_dir,
        checkpoint=args.checkpoint, allow_pickle=args.allow_pickle, ema=args.ema, precision=args.precision,
        height=args.height, width=args.width, cfg_batch=args.cfg_batch, models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
        verify=args.verify, verify_backends=parse_backends(args.verify_backend), seed=args.seed,
        overwrite=args.overwrite, quiet=args.quiet or args.json, clip_bpe=args.clip_bpe,
        graph=GraphOptions.from_args(args, timer=DelegateTimer() if args.tune else None),
    )
    result = run(opts)
    m = result.manifest
    if args.json:
        print(json_out.dumps({"out": str(result.out), "ok": result.ok, "source": m["source"], "parity": m["parity"],
                          "stages": m["stages"],
                          "fusion": {k: v["counts"] for k, v in m["fusion"].items()}, "op_errors": m["op_errors"],
                          "models": {k: {"file": v["file"], "bytes": v["bytes"], "num_ops": v["num_ops"]} for k, v in m["models"].items()}},
                         indent=2))
        return 0
    if not args.quiet:
        for name, e in m["models"].items():
            print(f"  {e['file']:<22}{e['bytes'] / 2**20:>9.1f} MiB{e['num_ops']:>7} ops")
        for report in result.op_reports.values():
            print(report.format_table())
        if result.parity:
            print(format_table(result.parity))
        if result.weights_note:
            print(result.weights_note)
        total = sum(s.seconds for s in result.stages)
        peak = max((s.peak_rss_mb for s in result.stages), default=0)
        print(f"done in {total:.1f} s (peak RSS {peak / 1024:.1f} GiB); files are in {result.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["inspect"]:
            from sdconvert.inspect import main as inspect_main

            rc = inspect_main(argv[1:])
        elif argv[:1] == ["optimize"]:
            from sdconvert.optimize_cli import main as optimize_main

            rc = optimize_main(argv[1:])
        else:
            rc = convert_main(argv)
        sys.stdout.flush()  # a closed pipe fails here, inside the handler below, not at interpreter exit
        return rc
    except UserError as e:
        print(f"sdconvert: error: {e}", file=sys.stderr)
        return 1 if isinstance(e, ParityError) else 2
    except KeyboardInterrupt:
        print("sdconvert: interrupted; no output written", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sdconvert inspect ... | head`: the reader has what it wanted
        _quiet_stdout()
        return 141


def _quiet_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush of the closed pipe prints nothing."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
