"""The conversion job: load -> export each model -> precision -> (fuse) -> verify -> tokenizer/scheduler -> manifest.

Everything is written into a temporary sibling folder and renamed into place at the end, so a failure (bad input,
tolerance miss, disk full) leaves no partial output. Models are exported one at a time and freed, because the SD1.5
UNet alone needs 11-19 GB of RAM in litert-torch.
"""
from __future__ import annotations

import errno
import gc
import json
import os
import resource
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TextIO

import numpy as np

from sdconvert.atomic_dir import make_parents, publish_dir, refuse_foreign_folder, refuse_overlap, remove_created
from sdconvert.errors import ParityError, UserError

from . import checks, litert, sources, verify
from .optimize import GraphOptions, format_fusion, optimize
from .wrappers import MODEL_NAMES, Shapes, build_wrapper, sample_inputs

PRECISIONS = ("fp32", "fp16", "int8")
NO_SPACE = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


@dataclass
class ConvertOptions:
    out: Path
    random_weights: str | None = None
    model_dir: Path | None = None
    checkpoint: Path | None = None
    allow_pickle: bool = False
    ema: bool | None = None  # single file: None = diffusers' default (non-EMA), True = model_ema.*, False = non-EMA
    precision: str = "fp32"
    height: int | None = None
    width: int | None = None
    cfg_batch: int = 1
    models: tuple[str, ...] = MODEL_NAMES
    verify: bool = False
    verify_backends: tuple[str, ...] = ("cpu",)  # --verify-backend: where the .tflite files run for --verify
    seed: int = 0
    overwrite: bool = False
    quiet: bool = False
    clip_bpe: Path | None = None
    graph: GraphOptions = field(default_factory=GraphOptions)


@dataclass
class StageTime:
    stage: str
    seconds: float
    peak_rss_mb: float


@dataclass
class ConvertResult:
    out: Path
    manifest: dict[str, Any]
    parity: list[verify.Parity] = field(default_factory=list)
    stages: list[StageTime] = field(default_factory=list)
    op_reports: dict[str, Any] = field(default_factory=dict)  # model -> opcheck.report.OpReport (fused + --verify)
    weights_note: str = ""  # which weights of the source were converted (single file: EMA or not), for the summary

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.parity)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _load(opts: ConvertOptions) -> sources.LoadedPipeline:
    given = [x for x in (opts.random_weights, opts.model_dir, opts.checkpoint) if x is not None]
    if len(given) != 1:
        raise UserError("give exactly one source: MODEL_DIR, --checkpoint FILE or --random-weights {sd15,tiny}")
    if opts.ema is not None and opts.checkpoint is None:
        raise UserError(f"--{'' if opts.ema else 'no-'}ema applies to --checkpoint files only")
    if opts.random_weights is not None:
        return sources.from_random(opts.random_weights, opts.seed)
    if opts.model_dir is not None:
        return sources.from_diffusers_folder(opts.model_dir)
    from . import single_file

    return single_file.load(opts.checkpoint, allow_pickle=opts.allow_pickle, ema=opts.ema)


def _prepare_tmp(out: Path, overwrite: bool, created: list[Path]) -> Path:
    """The temporary sibling folder the job writes into; parent folders it had to create are added to ``created``."""
    out = out.absolute()
    if out.exists() and not overwrite and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"output {out} already exists; pass --overwrite to replace it")
    if out.exists() and not out.is_dir():
        raise UserError(f"output {out} is a file, not a folder")
    refuse_foreign_folder(out)
    parent = out.parent
    try:
        created += make_parents(out)
        tmp = parent / f".{out.name}.tmp-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        probe = tmp / ".write-test"
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as e:
        remove_created(created)
        raise UserError(f"cannot write output folder {out}: {e.strerror or e}") from None
    return tmp


def run(opts: ConvertOptions) -> ConvertResult:
    """Run the whole job. Raises :class:`UserError` for user-fixable problems, leaving no output behind (no
    parent folder it created either); an existing output is replaced only once the new one is complete."""
    if opts.precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {PRECISIONS}, got {opts.precision!r}")
    if opts.cfg_batch not in (1, 2):
        raise UserError(f"--cfg-batch must be 1 or 2, got {opts.cfg_batch}")
    unknown = set(opts.models) - set(MODEL_NAMES)
    if unknown:
        raise UserError(f"unknown model(s) {sorted(unknown)}; choose from {list(MODEL_NAMES)}")
    checks.check_size(opts.height or 64, opts.width or 64)
    opts.graph.validate()
    from sdconvert.opcheck.args import VERIFY_BACKENDS

    if not opts.verify_backends or set(opts.verify_backends) - set(VERIFY_BACKENDS):
        raise UserError(f"--verify-backend takes a comma list of {', '.join(VERIFY_BACKENDS)}")
    if tuple(opts.verify_backends) != ("cpu",) and not opts.verify:
        raise UserError("--verify-backend applies with --verify")
    refuse_overlap(opts.out, [opts.model_dir, opts.checkpoint, opts.clip_bpe])
    created: list[Path] = []
    tmp = _prepare_tmp(opts.out, opts.overwrite, created)
    try:
        with litert.redirect_native_output(tmp / "conversion.log") as term:
            result = _run_in(tmp, opts, term)
        publish_dir(tmp, opts.out)
        result.out = opts.out.absolute()
        return result
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_created(created)
        if e.errno in NO_SPACE:
            raise UserError(f"no space left while writing {opts.out} ({e.strerror}); nothing was written") from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_created(created)
        raise


def _run_in(tmp: Path, opts: ConvertOptions, term: TextIO) -> ConvertResult:
    """The job itself; fds 1/2 go to conversion.log, ``term`` is the user's stderr."""
    import torch

    from .progress import Reporter

    log_path = tmp / "conversion.log"
    stages: list[StageTime] = []
    reporter = Reporter(term, opts.quiet)
    say = reporter.say

    def timed(stage: str, t0: float) -> None:
        stages.append(StageTime(stage, time.perf_counter() - t0, _peak_rss_mb()))

    t0 = time.perf_counter()
    say("loading model")
    loaded = _load(opts)
    timed("load", t0)
    weights_note = _weights_note(loaded)
    if weights_note:
        say(weights_note)
    height = opts.height or loaded.default_size[0]
    width = opts.width or loaded.default_size[1]
    checks.check_size(height, width)
    shapes = Shapes(height=height, width=width, cfg_batch=opts.cfg_batch,
                    latent_channels=int(loaded.vae_config.get("latent_channels", 4)),
                    vae_scale_factor=2 ** (len(loaded.vae_config["block_out_channels"]) - 1),
                    text_hidden=int(loaded.text_config["hidden_size"]))

    parity: list[verify.Parity] = []
    entries: dict[str, dict[str, Any]] = {}
    graph_info: dict[str, dict[str, Any]] = {}
    op_reports: dict[str, Any] = {}
    bar = reporter.bar(len(opts.models), "export", "model")
    for position, name in enumerate(opts.models):
        bar.set_description(f"export {name}")
        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(opts.seed + 1)
        wrapper = build_wrapper(name, loaded.modules)
        inputs = sample_inputs(name, shapes, gen)
        path = tmp / f"{name}.tflite"
        fp32_path = path if opts.precision == "fp32" else tmp / f"{name}.fp32.tflite"
        litert.check_free_space(tmp, wrapper)
        try:
            litert.convert_to_tflite(wrapper, inputs, fp32_path)
        except OSError as e:
            if e.errno in NO_SPACE:
                raise
            raise UserError(f"litert-torch failed to write {name}: {e}") from None
        except Exception as e:  # litert-torch raises many types; keep the message, the log has the rest
            raise UserError(f"litert-torch failed to convert {name}: {str(e).splitlines()[0][:300] if str(e) else type(e).__name__} "
                            f"(see the log tail:\n{litert.tail(log_path)})") from None
        timed(f"export {name}", t0)
        # The torch reference is computed now and the torch module dropped before the graph stages and the .tflite
        # run: otherwise the verify step holds the torch weights, the interpreter's packed copy and (Winograd) the
        # delegate's transformed filters at once -- three copies of a 3.4 GB fp32 SD1.5 UNet.
        ref: dict[str, np.ndarray] = {}
        ref_s = 0.0
        if opts.verify:
            t0 = time.perf_counter()
            with torch.no_grad():
                ref = {k: v.numpy() for k, v in wrapper(**inputs).items()}
            ref_s = time.perf_counter() - t0
        del wrapper
        release_modules(loaded.modules, done=name, remaining=opts.models[position + 1:])
        gc.collect()
        if opts.graph.active:
            t0 = time.perf_counter()
            # --verify keeps the plain graph until the per-op report has compared every fused op with it
            unfused = tmp / f"{name}.unfused.tflite" if opts.verify else fp32_path
            if opts.verify:
                os.replace(fp32_path, unfused)
            graph_info[name] = optimize(unfused, opts.graph, say, dst=fp32_path)
            if "fusion" in graph_info[name]:
                say(format_fusion(name, graph_info[name]["fusion"]))
            if "winograd_table" in graph_info[name] and graph_info[name]["winograd"].get("convs"):
                say(f"{name} Winograd plan:\n" + graph_info[name].pop("winograd_table"))
            graph_info[name].pop("winograd_table", None)
            fit = graph_info[name].pop("fit_residuals", None)
            timed(f"graph {name}", t0)
            if opts.verify:
                t0 = time.perf_counter()
                from sdconvert.opcheck.run import op_report

                say(f"per-op check of {name} on {', '.join(opts.verify_backends)}")
                op_reports[name] = op_report(name, unfused, fp32_path, {k: v.numpy() for k, v in inputs.items()},
                                             opts.verify_backends, workdir=tmp, fit_residuals=fit)
                unfused.unlink()
                gc.collect()
                timed(f"op check {name}", t0)
        if opts.precision != "fp32":
            t0 = time.perf_counter()
            from .precision import convert_weights

            convert_weights(fp32_path, path, opts.precision)
            fp32_path.unlink()
            timed(f"{opts.precision} {name}", t0)
        if opts.verify:
            t0 = time.perf_counter() - ref_s  # the stage's time covers the torch reference as well
            for backend in opts.verify_backends:
                got = verify.run_tflite(path, {k: v.numpy() for k, v in inputs.items()},
                                        delegates=_delegates_for(path, backend))
                for out_name, r in ref.items():
                    parity.append(verify.compare(name, got[out_name], r, verify.TOLERANCE[opts.precision], backend))
                del got
            timed(f"verify {name}", t0)
        entries[name] = {}
        del ref
        gc.collect()
        bar.update(1)
    bar.close()

    say("writing tokenizer, scheduler, manifest")
    _write_tokenizer(tmp, loaded, opts)
    (tmp / "scheduler").mkdir()
    (tmp / "scheduler" / "scheduler_config.json").write_text(json.dumps(loaded.scheduler_config, indent=2) + "\n")
    from sdconvert import manifest as mf

    for name in opts.models:
        entries[name] = mf.model_entry(tmp / f"{name}.tflite")
    manifest = {
        "format": mf.FORMAT, "version": mf.VERSION,
        "config": loaded.source.get("config", "custom"), "source": loaded.source,
        "precision": opts.precision, "height": height, "width": width, "cfg_batch": opts.cfg_batch,
        "latent_channels": shapes.latent_channels, "vae_scale_factor": shapes.vae_scale_factor,
        "vae_scaling_factor": float(loaded.vae_config.get("scaling_factor", 0.18215)),
        "text_hidden_size": shapes.text_hidden, "max_length": 77,
        "models": entries,
        "tokenizer": {"vocab": "tokenizer/vocab.json", "merges": "tokenizer/merges.txt"},
        "scheduler": "scheduler/scheduler_config.json",
        "parity": [p.as_dict() for p in parity],
        "fusion": {k: v["fusion"] for k, v in graph_info.items() if "fusion" in v},
        "winograd": {k: v["winograd"] for k, v in graph_info.items() if "winograd" in v},
        "op_errors": {k: r.as_dict() for k, r in op_reports.items()},
        "stages": [vars(s) for s in stages],
        "tools": mf.tool_versions(),
    }
    mf.write(tmp / "manifest.json", manifest)
    bad = [p for p in parity if not p.ok]
    if bad:
        worst = [line for r in op_reports.values() for line in r.summary_lines(top=3)]
        per_op = "\nper-op check (fused ops against the unfused graph):\n" + "\n".join(worst) if worst else ""
        raise ParityError("parity check failed:\n" + verify.format_table(parity) + per_op)
    return ConvertResult(out=tmp, manifest=manifest, parity=parity, stages=stages, op_reports=op_reports,
                         weights_note=weights_note)


def _weights_note(loaded: sources.LoadedPipeline) -> str:
    """The single-file EMA choice as one summary line ("" for other sources)."""
    ema = loaded.source.get("ema")
    if loaded.source.get("kind") != "single_file" or not isinstance(ema, dict):
        return ""
    from .single_file import EmaChoice

    return EmaChoice(**ema).describe()


#: The torch module (key of ``LoadedPipeline.modules``) each exported model's wrapper runs; see ``build_wrapper``.
MODULE_OF = {"text_encoder": "text_encoder", "unet": "unet", "vae_decoder": "vae", "vae_encoder": "vae"}


def release_modules(modules: dict[str, Any], done: str, remaining: Sequence[str]) -> None:
    """Drop ``done``'s torch module from ``modules`` unless a model still to export uses it (the VAE serves two)."""
    key = MODULE_OF.get(done)
    if key is not None and key not in {MODULE_OF.get(m) for m in remaining}:
        modules.pop(key, None)


def _write_tokenizer(tmp: Path, loaded: sources.LoadedPipeline, opts: ConvertOptions) -> None:
    dst = tmp / "tokenizer"
    if loaded.tokenizer_dir is not None:
        copy_tokenizer(loaded.tokenizer_dir, dst)
        return
    from sdlite.errors import SdliteError
    from sdlite.tokenizer import build_clip_vocab_files, find_clip_bpe

    try:
        bpe = opts.clip_bpe or find_clip_bpe()
    except (SdliteError, OSError) as e:
        raise UserError(str(e)) from None
    build_clip_vocab_files(Path(bpe), dst)


def copy_tokenizer(src: Path, dst: Path) -> None:
    """Write HF-format vocab.json + merges.txt from a diffusers tokenizer/ folder (slow or fast-tokenizer layout)."""
    dst.mkdir()
    if (src / "vocab.json").exists() and (src / "merges.txt").exists():
        shutil.copy2(src / "vocab.json", dst / "vocab.json")
        shutil.copy2(src / "merges.txt", dst / "merges.txt")
        return
    try:
        model = json.loads((src / "tokenizer.json").read_text())["model"]
        vocab, merges = model["vocab"], model["merges"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{src} has neither vocab.json+merges.txt nor a readable BPE tokenizer.json") from None
    (dst / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    lines = [m if isinstance(m, str) else " ".join(m) for m in merges]
    (dst / "merges.txt").write_text("#version: 0.2\n" + "\n".join(lines) + "\n")


def _delegates_for(path: Path, backend: str = "cpu") -> list[Any]:
    """The delegates ``path`` runs with on ``backend``: on ``cpu`` XNNPACK alone, plus our native delegate's CPU
    kernels when the model holds fused ``Sd*`` custom ops; on ``opencl`` / ``gl`` our delegate runs the whole graph."""
    from sdlite.tflite_info import read_model_info

    if backend == "cpu" and not read_model_info(path).fused_ops:
        return []
    try:
        from sdlite import native

        return [native.load(backend=backend)]
    except Exception as e:  # noqa: BLE001 - missing/unbuildable library or GPU driver: say what to do
        what = "of a fused model" if backend == "cpu" else f"on {backend}"
        raise UserError(f"--verify {what} needs the native delegate ({e}); run scripts/install.sh") from None
