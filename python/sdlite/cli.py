"""``sdlite`` command line: ``generate`` images and ``bench`` models.

User mistakes end as one line ``sdlite: error: <message>`` on stderr with exit status 2 (argparse errors
included); warnings (e.g. a truncated prompt) as ``sdlite: warning: <message>``.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from sdlite import json_out
from sdlite.errors import SdliteError

if TYPE_CHECKING:
    from sdlite.backends import BackendOptions

PROG = "sdlite"


class _Parser(argparse.ArgumentParser):
    """Errors become one-line :class:`SdliteError`s; the option strings are kept to name the closest one to a typo."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.known_flags: list[str] = []
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        self.known_flags += [a for a in args if isinstance(a, str) and a.startswith("-")]
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise SdliteError(message)


DELEGATE_OPTIONS_HELP = ("sdgpu delegate options as key:value;key:value (benchmark_model's --external_delegate_options "
                         "form), e.g. 'tensor_cores:3xtf32' (see the delegate options table in README.md)")


# `sdlite generate --phone`: a phone's memory budget (issue 37; BENCHMARKS.md "The phone preset inside the budget"),
# on top of --low-memory: half the GPU bytes of weights and activations, ~50 dB PSNR against fp32 on SD1.5.
PHONE_DELEGATE_OPTIONS = {"weights_fp16": True, "activations_fp16": True}


def _add_backend_args(p: argparse.ArgumentParser) -> None:
    from sdlite.backends import BACKENDS

    p.add_argument("--backend", default="cpu", help=f"execution backend: {', '.join(BACKENDS)} (default cpu)")
    p.add_argument("--num_threads", "--num-threads", dest="num_threads", type=int, default=None,
                   help="CPU threads (default: all usable cores)")
    p.add_argument("--allow-fp16", action="store_true", help="let litert-gpu compute in fp16")
    p.add_argument("--verbose", action="store_true", help="show native runtime logs and where each op ran")
    p.add_argument("--delegate_options", "--delegate-options", dest="delegate_options", default="",
                   help=DELEGATE_OPTIONS_HELP)


def _add_bench_args(b: argparse.ArgumentParser) -> None:
    """benchmark_model's flags (:mod:`sdlite.bench.flags`, default None = not given) plus sdlite's extras."""
    from sdlite.backends import BACKENDS
    from sdlite.bench.flags import FLAGS, parse_bool

    b.add_argument("target", nargs="?", help="MODEL.tflite or FOLDER, optionally suffixed @BACKEND (or --graph)")
    b.add_argument("--compare", nargs="+", metavar="SPEC",
                   help="benchmark several PATH[@BACKEND] side by side and print ratios to the first")
    b.add_argument("--models", default=None, help="for folders: comma-separated model names (default all)")
    b.add_argument("--top", type=int, default=10, help="rows of 'Top by Computation Time' (default 10)")
    b.add_argument("--json", action="store_true", help="print results as JSON")
    b.add_argument("--backend", default=None,
                   help=f"execution backend: {', '.join(BACKENDS)} (default cpu; see also --use_gpu and "
                        "--external_delegate_options=backend:...)")
    b.add_argument("--delegate_options", "--delegate-options", dest="delegate_options", default="",
                   help=DELEGATE_OPTIONS_HELP)
    for flag in FLAGS:
        shown = str(flag.default).lower() if flag.kind is bool else repr(flag.default) if flag.kind is str else flag.default
        b.add_argument(*flag.options, dest=flag.name, default=None, metavar=flag.kind.__name__.upper(),
                       type=parse_bool if flag.kind is bool else flag.kind,
                       help=f"{flag.help} (benchmark_model flag, default {shown})")


def build_parser() -> argparse.ArgumentParser:
    from sdlite.scheduler_names import SCHEDULER_NAMES

    parser = _Parser(prog=PROG, description="Run Stable Diffusion models converted by sdconvert (TFLite/LiteRT).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="text-to-image / image-to-image", allow_abbrev=False)
    g.add_argument("model", type=Path, help="converted model folder (has manifest.json)")
    g.add_argument("-p", "--prompt", required=True)
    g.add_argument("-n", "--negative-prompt", default="")
    g.add_argument("--steps", type=int, default=25)
    g.add_argument("--guidance-scale", "--cfg", dest="guidance_scale", type=float, default=7.5,
                   help="classifier-free guidance scale; <= 1 disables guidance (default 7.5)")
    g.add_argument("--seed", type=int, default=0,
                   help="image k draws from its own random stream seeded seed+k (default 0); see --noise")
    g.add_argument("--noise", default="numpy", choices=("numpy", "torch"),
                   help="the random stream: numpy (default: PCG64, no torch needed) or torch (CPU torch.Generator, "
                        "the numbers diffusers draws: --seed S reproduces diffusers with "
                        "generator=torch.Generator().manual_seed(S)); see sdlite.noise")
    g.add_argument("--height", type=int, default=None, help="must equal the exported height (default: it)")
    g.add_argument("--width", type=int, default=None, help="must equal the exported width (default: it)")
    g.add_argument("--num-images", type=int, default=1)
    g.add_argument("--scheduler", default="pndm", help=f"one of {', '.join(SCHEDULER_NAMES)} (default pndm)")
    g.add_argument("--init-image", type=Path, default=None, help="img2img: start from this image")
    g.add_argument("--strength", type=float, default=0.8, help="img2img: how much to change it, (0, 1]")
    g.add_argument("-o", "--output", type=Path, default=Path("sdlite.png"),
                   help="PNG path; with several images NAME-0.png, NAME-1.png, ... (default sdlite.png)")
    g.add_argument("--json", action="store_true", help="print a JSON summary (timings, files) on stdout")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--low-memory", action="store_true",
                   help="one model on the device at a time (text encoder, then UNet, then VAE): peak GPU memory of the "
                        "largest model instead of the sum; models reload per image (cheap with the delegate cache)")
    g.add_argument("--phone", action="store_true",
                   help="the phone preset: --low-memory with fp16 weights and fp16 activation storage on the GPU "
                        "(delegate options weights_fp16:1;activations_fp16:1; fp32 arithmetic); pairs with a model "
                        "converted with `sdconvert --phone`")
    g.add_argument("--no-verify", action="store_true",
                   help="skip checking the model files against the sha256 sums in manifest.json (checked once per "
                        "file version, then remembered by size and mtime)")
    _add_backend_args(g)

    b = sub.add_parser("bench", help="benchmark a .tflite model or a converted folder (TFLite benchmark_model's flags)",
                       description="Benchmark a .tflite model or every model of a converted folder. Takes TFLite "
                                   "benchmark_model's flags (--graph=M --num_runs=50 --enable_op_profiling=true "
                                   "--external_delegate_path=LIB --external_delegate_options='backend:opencl' ...) "
                                   "and prints its report; see docs/bench.md.", allow_abbrev=False)
    _add_bench_args(b)
    parser.subcommands = {"generate": g, "bench": b}  # type: ignore[attr-defined]
    return parser


def _backend_options(args: argparse.Namespace, progress: bool = False):
    from sdlite.backends import BackendOptions

    return BackendOptions(name=args.backend, num_threads=args.num_threads, allow_fp16=args.allow_fp16,
                          verbose=args.verbose, progress=progress)


def _output_paths(output: Path, n: int) -> list[Path]:
    if output.suffix.lower() != ".png":
        raise SdliteError(f"--output must end in .png, got {output}")
    if n == 1:
        return [output]
    return [output.with_name(f"{output.stem}-{k}{output.suffix}") for k in range(n)]


# Stats of our GPU delegate that say where a model's one-time set-up went and what the persistent cache served.
# programs_shared: OpenCL programs a model took from the models loaded before it (one context per process);
# context_shared: 1 where the model's delegate joined a context made before it (the early device, or an earlier model).
_SETUP_STATS = ("setup_phases_ms", "setup_programs_us", "programs_built", "programs_shared", "context_shared",
                "setup_weights_host_us", "setup_weights_upload_us", "setup_tuning_us", "weights_on_device",
                "weights_on_host", "cache_dir", "cache_hits", "cache_misses", "cache_rejected", "cache_stores",
                "tiles_tuned", "tiles_from_cache", "tiles_untuned", "device_weight_bytes", "max_arena_bytes",
                "host_pages_released_bytes", "upload_ring_bytes", "max_host_weight_bytes", "upload_waits",
                "upload_drains")


def _startup_record(interp: Any, timeline: Any, early_device_s: float | None = None) -> dict[str, Any]:
    """Per model: delegate creation, interpreter load, first / second call (the first carries the one-time set-up;
    ``warmed_up``: it was Interpreter.warm_up's, on zero inputs, beside the other models'), and the delegate's own
    set-up stats; plus the process timeline and ``early_device_s``, the OpenCL device made at process start
    (sdlite.early_device; None: not made)."""
    models: dict[str, Any] = {}
    for name, r in interp.used_runners().items():
        stats = r.delegate_stats()
        steady = r.second_call_s
        models[name] = {
            "delegate_s": r.delegate_s, "load_s": r.load_s, "calls": r.calls, "warmed_up": r.warmed_up,
            "first_call_s": r.first_call_s,
            "second_call_s": steady,
            "setup_s": max(0.0, r.first_call_s - steady) if r.first_call_s is not None and steady is not None else None,
            "delegate": {k: stats[k] for k in _SETUP_STATS if k in stats} if stats else None,
            "gpu_bytes": r.gpu_bytes(stats),
        }
    return {"timeline": timeline.to_dict(), "early_device_s": early_device_s, "models": models}


def _memory_record(interp: Any, startup: dict[str, Any], low_memory: bool) -> dict[str, Any]:
    """Peak memory of the run: GPU (our delegates' own accounting: device weights + arena, per model as the startup
    record has it, and the most held at once) and the process's peak resident host memory (getrusage; the models'
    mapped files count)."""
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_model = {name: m["gpu_bytes"] for name, m in startup["models"].items()}
    return {
        "low_memory": low_memory,
        "peak_gpu_bytes": interp.peak_gpu_bytes if any(v is not None for v in per_model.values()) else None,
        "gpu_bytes": per_model,
        "peak_host_rss_bytes": int(rss) * (1 if sys.platform == "darwin" else 1024),
    }


def cmd_generate(args: argparse.Namespace) -> int:
    from sdlite.startup import Timeline

    timeline = getattr(args, "timeline", None) or Timeline()
    from dataclasses import replace

    from sdlite.images import load_init_image, save_png, warm_png_writer
    from sdlite.interpreter import Interpreter
    from sdlite.noise import per_image_noise
    from sdlite.pipeline import GenerationParams, StableDiffusionPipeline, warm_progress_bars

    timeline.mark("imports_done")
    if not args.prompt.strip():
        raise SdliteError("prompt is empty")
    params = GenerationParams(
        prompt=args.prompt, negative_prompt=args.negative_prompt, steps=args.steps,
        guidance_scale=args.guidance_scale, seed=args.seed, height=args.height, width=args.width,
        num_images=args.num_images, scheduler=args.scheduler, strength=args.strength,
    )
    outputs = _output_paths(args.output, params.num_images)
    require = ("text_encoder", "unet", "vae_decoder") + (("vae_encoder",) if args.init_image else ())
    progress = not args.no_progress and not args.json
    interp = Interpreter(args.model, _backend_options(args, progress=progress), require=require)
    m = interp.manifest
    params.validate(m.height, m.width)
    if not args.no_verify:
        from sdlite.checksums import default_record

        m.verify_checksums(require, record=default_record())
    noise = per_image_noise(params.seed, params.num_images, args.noise)
    init = load_init_image(args.init_image, m.width, m.height) if args.init_image else None
    record: dict[str, Any] = {
        **{k: v for k, v in vars(params).items() if k != "strength" or args.init_image},  # strength: img2img only
        "height": m.height, "width": m.width, "model": m.config, "backend": interp.backend, "noise": args.noise,
        "init_image": str(args.init_image) if args.init_image else None,
    }
    results = []
    try:
        # fail on an unavailable backend before any work (low memory: the first model only; it is needed first)
        pipes: list[StableDiffusionPipeline] = []

        def models_loaded() -> None:  # (beside the warm-ups: what it imports and reads is off the first PNG's way)
            timeline.mark("models_loaded")
            pipes.append(StableDiffusionPipeline(interp, low_memory=args.low_memory))  # (reads the tokenizer)
            warm_png_writer()
            warm_progress_bars()

        if args.low_memory:  # one model at a time, as the pipeline reaches it
            interp.load_all(("text_encoder",))
            models_loaded()
        else:  # every model's one-time GPU set-up at once, the UNet's (the longest) started first
            interp.warm_up(("unet", *(n for n in require if n != "unet")), loaded=models_loaded)
            timeline.mark("models_ready")
        pipe = pipes[0]
        # One image at a time when one image's UNet calls fill whole batches (CFG on a cfg-batch-2 export, any
        # batch-1 export): the same calls and the same images (image k draws from its own stream, seed + k), and each
        # image's time is its own -- the first carries the delegates' set-up, the next ones are steady state.
        # Otherwise (no CFG on a batch-2 export) the images share UNet calls, generated together.
        if params.num_images > 1 and pipe.calls_per_image_fill_batches(params):
            for k in range(params.num_images):
                one = replace(params, num_images=1, seed=params.seed + k)
                results.append(pipe.generate(one, init_image=init, noise=[noise[k]], progress=progress))
                save_png(results[-1].images[0], outputs[k], {**record, "seed": params.seed + k, "image_index": k})
                timeline.mark(f"png_{k}")
        else:
            results.append(pipe.generate(params, init_image=init, noise=noise, progress=progress))
            for k, img in enumerate(results[0].images):
                save_png(img, outputs[k], {**record, "seed": results[0].seeds[k], "image_index": k})
                timeline.mark(f"png_{k}")
        early = getattr(args, "early_device", None)
        startup = _startup_record(interp, timeline, early.made_s if early is not None else None)
        memory = _memory_record(interp, startup, args.low_memory)
    finally:
        interp.close()
    seeds = [s for r in results for s in r.seeds]
    placement = results[0].placement
    t = results[0].timings
    if args.json:
        summary = {
            "images": [str(p) for p in outputs], "seeds": seeds, "model": str(args.model),
            "backend": interp.backend, "params": record, "timings": t.to_dict(),
            "image_s": [r.timings.total_s for r in results] if len(results) > 1 else None,
            "image_timings": [r.timings.to_dict() for r in results] if len(results) > 1 else None,
            "startup": startup, "placement": placement, "memory": memory,
        }
        print(json_out.dumps(summary))
    else:
        if args.verbose:  # which executor ran which ops: diagnostics, not a result
            for name, where in placement.items():
                print(f"{name}: {where}")
        for k, path in enumerate(outputs):
            print(f"wrote {path} (seed {seeds[k]})")
        d = t.to_dict()
        steps = len(t.unet_step_s)
        steady = d["unet_step_steady_mean_s"]
        print(f"timings: text encoder {t.text_encoder_s * 1e3:.1f} ms, unet {steps} steps x "
              f"{d['unet_step_mean_s'] * 1e3:.1f} ms = {sum(t.unet_step_s) * 1e3:.1f} ms "
              f"({t.unet_calls} calls" + (f"; first {d['unet_first_step_s'] * 1e3:.1f} ms, then "
                                         f"{steady * 1e3:.1f} ms" if steady is not None else "") + ")"
              f", vae decode {sum(t.vae_decode_s) * 1e3:.1f} ms"
              + (f", vae encode {t.vae_encode_s * 1e3:.1f} ms" if args.init_image else "")
              + f", total {t.total_s:.2f} s"
              + ("".join(f"; image {k + 1} {r.timings.total_s:.2f} s" for k, r in enumerate(results[1:], 1))))
    return 0


@dataclass(frozen=True)
class BenchPlan:
    """``sdlite bench``'s command line resolved: flags given, backend, delegate library and options."""

    given: dict[str, Any]  # benchmark_model flags set on the command line
    backend: BackendOptions
    delegate_options: dict[str, Any]
    library: str  # --external_delegate_path ("" = the packaged delegate)

    def value(self, name: str) -> Any:
        from sdlite.bench.flags import BY_NAME

        return self.given.get(name, BY_NAME[name].default)


def _bench_plan(args: argparse.Namespace) -> BenchPlan:
    """Map benchmark_model's flags onto sdlite's backends (``--use_gpu``: the stock GPU accelerator; our delegate's
    backend from ``--external_delegate_options``'s ``backend`` key), one-line errors for contradictions."""
    from sdlite import native
    from sdlite.backends import BackendOptions
    from sdlite.bench.flags import FLAGS

    given = {f.name: getattr(args, f.name) for f in FLAGS if getattr(args, f.name) is not None}
    if args.target and "graph" in given:
        raise SdliteError("give the model once: as the positional argument or as --graph")
    external = dict(native.parse_items(given.get("external_delegate_options", "")))
    wanted = {src: name for src, name in (
        ("--backend", args.backend),
        ("--use_gpu=true", "litert-gpu" if given.get("use_gpu") else None),
        ("--external_delegate_options=backend:...", external.pop("backend", None)),
    ) if name}
    if len(set(wanted.values())) > 1:
        raise SdliteError("conflicting backends: " + ", ".join(f"{src} gives {name}" for src, name in wanted.items()))
    backend = next(iter(wanted.values()), "cpu")
    if given.get("external_delegate_path") and backend not in ("cpu", "opencl", "gl"):
        raise SdliteError(f"--external_delegate_path loads our delegate, which has no backend {backend!r} "
                          "(cpu, opencl or gl)")
    threads = given.get("num_threads", -1)
    options = BackendOptions(
        name=backend, num_threads=None if threads == -1 else threads, allow_fp16=given.get("allow_fp16", False),
        verbose=given.get("verbose", False), use_xnnpack=given.get("use_xnnpack", True))
    delegate = {**native.parse_options_text(args.delegate_options), **native.typed_options(external)}
    return BenchPlan(given, options, delegate, given.get("external_delegate_path", ""))


def cmd_bench(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from sdlite import native
    from sdlite.bench.flags import echo_lines
    from sdlite.bench.loop import TimingRules
    from sdlite.bench.report import INFO, comparison_table, model_report, profile_csv
    from sdlite.bench.run import ReportOptions, bench_target, expand, unique_labels

    plan = _bench_plan(args)
    specs = list(args.compare or [])
    graph = args.target or plan.given.get("graph")
    if graph:
        specs.insert(0, graph)
    if not specs:
        raise SdliteError("bench needs a MODEL.tflite or FOLDER (or --graph=MODEL, or --compare SPEC SPEC ...)")
    if args.compare and len(specs) < 2:
        raise SdliteError("--compare needs at least two PATH[@BACKEND] specs")
    value = plan.value
    rules = TimingRules(min_secs=value("min_secs"), max_secs=value("max_secs"),
                        warmup_min_secs=value("warmup_min_secs"), run_delay=value("run_delay"),
                        run_frequency=value("run_frequency"))
    interval = value("memory_footprint_check_interval_ms")
    if value("report_peak_memory_footprint") and interval <= 0:
        raise SdliteError(f"--memory_footprint_check_interval_ms must be > 0, got {interval}")
    report = ReportOptions(preinvoke_state=value("print_preinvoke_state"),
                           postinvoke_state=value("print_postinvoke_state"),
                           peak_memory_interval_ms=interval if value("report_peak_memory_footprint") else 0,
                           require_full_delegation=value("require_full_delegation"))
    csv_file = value("profiling_output_csv_file")
    profiling = value("enable_op_profiling")
    if csv_file and not profiling:
        warnings.warn("--profiling_output_csv_file has no effect without --enable_op_profiling=true")
    models = tuple(m.strip() for m in args.models.split(",")) if args.models else None
    with ExitStack() as stack:
        if plan.library:
            stack.enter_context(native.use_library(plan.library))
        stack.enter_context(native.extra_options(**plan.delegate_options))
        targets = unique_labels([t for spec in specs for t in expand(spec, plan.backend, models)])
        if csv_file and profiling and len(targets) > 1:
            raise SdliteError(f"--profiling_output_csv_file takes one model; {len(targets)} are benchmarked "
                              "(use --models or one .tflite)")
        if not args.json:
            given = {**plan.given, "graph": " ".join(specs)}
            print(f"{INFO}STARTING!")
            print("\n".join(INFO + line for line in echo_lines(given, value("verbose"))), flush=True)
        results = []
        for target in targets:
            r = bench_target(target, value("num_runs"), value("warmup_runs"), profiling, rules=rules, report=report)
            results.append(r)
            if args.json:
                continue
            to_csv = bool(csv_file and r.profile is not None)
            if to_csv:
                _write_text(Path(csv_file), profile_csv(r.profile, args.top))
            print(model_report(r, args.top, profile_in_csv=to_csv))
            print(flush=True)
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
    for rs in comparable.values():
        print(comparison_table(rs))
        print()
    return 0


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise SdliteError(f"cannot write {path}: {exc.strerror or exc}") from None


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; an argument no option takes is an error naming the closest known flag."""
    from sdlite.bench.flags import preprocess, unknown_flag_error

    if argv[:1] == ["bench"]:
        argv = ["bench", *preprocess(argv[1:])]
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = parser.subcommands[args.command]  # type: ignore[attr-defined]
        raise unknown_flag_error(extra[0], sub.known_flags)
    return args


def _quiet_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush of a closed pipe prints nothing."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


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
        args = parse_args(parser, sys.argv[1:] if argv is None else list(argv))
        if argv is None and not getattr(args, "verbose", False):
            _silence_native_teardown()
        if args.command == "bench":
            rc = cmd_bench(args)
        else:
            from sdlite import native
            from sdlite.startup import Timeline

            args.timeline = Timeline()
            args.timeline.mark("main")

            options = native.parse_options_text(args.delegate_options)
            if args.phone:  # the phone preset; explicit --delegate-options keys win
                args.low_memory = True
                options = {**PHONE_DELEGATE_OPTIONS, **options}
            with native.extra_options(**options):
                from sdlite.early_device import EarlyDevice

                # the OpenCL device made while cmd_generate imports and checks the models (sdlite/early_device.py)
                args.early_device = early = EarlyDevice.start(args.backend, options)
                try:
                    rc = cmd_generate(args)
                except BaseException:
                    if early is not None:  # the error is printed now, not once the device is made
                        early.abandon()
                    raise
                if early is not None:
                    early.close()
        sys.stdout.flush()  # a closed pipe fails here, inside the handler below, not at interpreter exit
        return rc
    except SdliteError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sdlite bench ... | head`: the reader left; say nothing more
        _quiet_stdout()
        return 141
    finally:
        warnings.showwarning = previous


if __name__ == "__main__":
    sys.exit(main())
