"""``sdlite`` command line: ``generate`` images and ``bench`` models.

User mistakes end as one line ``sdlite: error: <message>`` on stderr with exit status 2 (argparse errors
included); warnings (e.g. a truncated prompt) as ``sdlite: warning: <message>``.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn

from sdlite import json_out
from sdlite.errors import SdliteError

PROG = "sdlite"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SdliteError(message)


def _add_backend_args(p: argparse.ArgumentParser) -> None:
    from sdlite.backends import BACKENDS

    p.add_argument("--backend", default="cpu", help=f"execution backend: {', '.join(BACKENDS)} (default cpu)")
    p.add_argument("--num_threads", "--num-threads", dest="num_threads", type=int, default=None,
                   help="CPU threads (default: all usable cores)")
    p.add_argument("--allow-fp16", action="store_true", help="let litert-gpu compute in fp16")
    p.add_argument("--verbose", action="store_true", help="show native runtime logs")
    p.add_argument("--delegate_options", "--delegate-options", dest="delegate_options", default="",
                   help="sdgpu delegate options as key:value;key:value (benchmark_model's --external_delegate_options "
                        "form), e.g. 'tensor_cores:3xtf32' (see sdlite.native.DelegateOptions)")


def build_parser() -> argparse.ArgumentParser:
    from sdlite.schedulers import SCHEDULERS

    parser = _Parser(prog=PROG, description="Run Stable Diffusion models converted by sdconvert (TFLite/LiteRT).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="text-to-image / image-to-image")
    g.add_argument("model", type=Path, help="converted model folder (has manifest.json)")
    g.add_argument("-p", "--prompt", required=True)
    g.add_argument("-n", "--negative-prompt", default="")
    g.add_argument("--steps", type=int, default=25)
    g.add_argument("--guidance-scale", "--cfg", dest="guidance_scale", type=float, default=7.5,
                   help="classifier-free guidance scale; <= 1 disables guidance (default 7.5)")
    g.add_argument("--seed", type=int, default=0, help="image k uses seed+k (default 0)")
    g.add_argument("--height", type=int, default=None, help="must equal the exported height (default: it)")
    g.add_argument("--width", type=int, default=None, help="must equal the exported width (default: it)")
    g.add_argument("--num-images", type=int, default=1)
    g.add_argument("--scheduler", default="pndm", help=f"one of {', '.join(SCHEDULERS)} (default pndm)")
    g.add_argument("--init-image", type=Path, default=None, help="img2img: start from this image")
    g.add_argument("--strength", type=float, default=0.8, help="img2img: how much to change it, (0, 1]")
    g.add_argument("-o", "--output", type=Path, default=Path("sdlite.png"),
                   help="PNG path; with several images NAME-0.png, NAME-1.png, ... (default sdlite.png)")
    g.add_argument("--json", action="store_true", help="print a JSON summary (timings, files) on stdout")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--no-verify", action="store_true",
                   help="skip checking the model files against the sha256 sums in manifest.json (checked once per "
                        "file version, then remembered by size and mtime)")
    _add_backend_args(g)

    b = sub.add_parser("bench", help="benchmark a .tflite model or a converted folder (benchmark_model style)")
    b.add_argument("target", nargs="?", help="MODEL.tflite or FOLDER, optionally suffixed @BACKEND")
    b.add_argument("--compare", nargs="+", metavar="SPEC",
                   help="benchmark several PATH[@BACKEND] side by side and print ratios to the first")
    b.add_argument("--models", default=None, help="for folders: comma-separated model names (default all)")
    b.add_argument("--num_runs", "--num-runs", dest="num_runs", type=int, default=50)
    b.add_argument("--warmup_runs", "--warmup-runs", dest="warmup_runs", type=int, default=1)
    b.add_argument("--enable_op_profiling", "--enable-op-profiling", dest="enable_op_profiling",
                   action="store_true", help="per-node timing (isolated nodes, see report note)")
    b.add_argument("--top", type=int, default=10, help="rows of 'Top by Computation Time' (default 10)")
    b.add_argument("--json", action="store_true", help="print results as JSON")
    _add_backend_args(b)
    return parser


def _backend_options(args: argparse.Namespace):
    from sdlite.backends import BackendOptions

    return BackendOptions(name=args.backend, num_threads=args.num_threads, allow_fp16=args.allow_fp16,
                          verbose=args.verbose)


def _output_paths(output: Path, n: int) -> list[Path]:
    if output.suffix.lower() != ".png":
        raise SdliteError(f"--output must end in .png, got {output}")
    if n == 1:
        return [output]
    return [output.with_name(f"{output.stem}-{k}{output.suffix}") for k in range(n)]


def cmd_generate(args: argparse.Namespace) -> int:
    from sdlite.images import load_init_image, save_png
    from sdlite.interpreter import Interpreter
    from sdlite.pipeline import GenerationParams, StableDiffusionPipeline

    if not args.prompt.strip():
        raise SdliteError("prompt is empty")
    params = GenerationParams(
        prompt=args.prompt, negative_prompt=args.negative_prompt, steps=args.steps,
        guidance_scale=args.guidance_scale, seed=args.seed, height=args.height, width=args.width,
        num_images=args.num_images, scheduler=args.scheduler, strength=args.strength,
    )
    outputs = _output_paths(args.output, params.num_images)
    require = ("text_encoder", "unet", "vae_decoder") + (("vae_encoder",) if args.init_image else ())
    interp = Interpreter(args.model, _backend_options(args), require=require)
    m = interp.manifest
    params.validate(m.height, m.width)
    if not args.no_verify:
        from sdlite.checksums import default_record

        m.verify_checksums(require, record=default_record())
    init = load_init_image(args.init_image, m.width, m.height) if args.init_image else None
    try:
        interp.load_all(require)  # fail on an unavailable backend before any work
        pipe = StableDiffusionPipeline(interp)
        result = pipe(params, init_image=init, progress=not args.no_progress and not args.json)
    finally:
        interp.close()
    record: dict[str, Any] = {
        **{k: v for k, v in vars(params).items()}, "height": m.height, "width": m.width,
        "model": m.config, "backend": interp.backend, "init_image": str(args.init_image) if args.init_image else None,
    }
    for k, (img, path) in enumerate(zip(result.images, outputs)):
        save_png(img, path, {**record, "seed": result.seeds[k], "image_index": k})
    t = result.timings
    if args.json:
        summary = {
            "images": [str(p) for p in outputs], "seeds": result.seeds, "model": str(args.model),
            "backend": interp.backend, "params": record, "timings": t.to_dict(), "placement": result.placement,
        }
        print(json_out.dumps(summary))
    else:
        for name, where in result.placement.items():
            print(f"{name}: {where}")
        for k, path in enumerate(outputs):
            print(f"wrote {path} (seed {result.seeds[k]})")
        steps = len(t.unet_step_s)
        print(f"timings: text encoder {t.text_encoder_s * 1e3:.1f} ms, unet {steps} steps x "
              f"{t.to_dict()['unet_step_mean_s'] * 1e3:.1f} ms = {sum(t.unet_step_s) * 1e3:.1f} ms "
              f"({t.unet_calls} calls), vae decode {sum(t.vae_decode_s) * 1e3:.1f} ms"
              + (f", vae encode {t.vae_encode_s * 1e3:.1f} ms" if args.init_image else "")
              + f", total {t.total_s:.2f} s")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from sdlite.bench.report import comparison_table, model_report
    from sdlite.bench.run import bench_target, expand

    specs = list(args.compare or [])
    if args.target:
        specs.insert(0, args.target)
    if not specs:
        raise SdliteError("bench needs a MODEL.tflite or FOLDER (or --compare SPEC SPEC ...)")
    if args.compare and len(specs) < 2:
        raise SdliteError("--compare needs at least two PATH[@BACKEND] specs")
    models = tuple(m.strip() for m in args.models.split(",")) if args.models else None
    default = _backend_options(args)
    targets = [t for spec in specs for t in expand(spec, default, models)]
    results = [bench_target(t, args.num_runs, args.warmup_runs, args.enable_op_profiling) for t in targets]
    groups: dict[str, list] = {}
    for r in results:
        groups.setdefault(r.group, []).append(r)
    comparable = {g: rs for g, rs in groups.items() if len(rs) > 1} if len(specs) > 1 else {}
    if args.json:
        out: dict[str, Any] = {"results": [r.to_dict() for r in results]}
        if comparable:
            out["comparison"] = {
                g: [{"label": r.label, "backend": r.backend, "avg_us": r.stats.avg,
                     "ratio": r.stats.avg / rs[0].stats.avg} for r in rs] for g, rs in comparable.items()
            }
        print(json_out.dumps(out))
        return 0
    for r in results:
        print(model_report(r, args.top))
        print()
    for rs in comparable.values():
        print(comparison_table(rs))
        print()
    return 0


def _format_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _silence_native_teardown() -> None:
    """At exit, LiteRT's global environment logs accelerator teardown on fd 2; hide it for CLI runs."""
    import atexit
    import os

    def hush() -> None:
        try:
            sys.stderr.flush()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
        except OSError:
            pass

    atexit.register(hush)


def main(argv: list[str] | None = None) -> int:
    """Entry point; ``argv=None`` means the real command line (then native teardown logs are hidden)."""
    parser = build_parser()
    previous = warnings.showwarning
    warnings.showwarning = _format_warning
    try:
        args = parser.parse_args(argv)
        if argv is None and not getattr(args, "verbose", False):
            _silence_native_teardown()
        from sdlite import native

        with native.extra_options(**native.parse_options_text(args.delegate_options)):
            return cmd_generate(args) if args.command == "generate" else cmd_bench(args)
    except SdliteError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = previous


if __name__ == "__main__":
    sys.exit(main())
