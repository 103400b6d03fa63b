"""SD1.5 side by side on one GPU machine: our delegate (unfused / fused / fused+Winograd), LiteRT CPU, the stock
LiteRT GPU attempt and PyTorch fp32/fp16, in ONE run; writes ``OUT/h200.json`` and ``OUT/h200.md``.

Also ``OUT/h200-details.tar.gz``: per-node device profiles, ``sdlite bench`` reports, worker logs.
Runs on the device (``bench/run.sh``) and, for testing, here on the tiny models (PoCL as the GPU,
``--torch-device cpu``). Stages, in the order given by ``--stages``:

``prepare``    refill the weights of each kit model (seeded) and derive the variants (sdconvert optimize)
``ours``       each variant on each of our delegate's GPU backends: timings, device profile, memory, outputs
``torch``      diffusers UNet / VAE decoder of the same config: fp32 with TF32 off, fp16
``cpu``        LiteRT CPU (XNNPACK, all cores) - also the parity reference
``litert-gpu`` the stock LiteRT GPU accelerator through ``sdlite bench --backend litert-gpu`` (subprocess,
               timeout: it may fall back to CPU, fail or crash; what happened is recorded)
``e2e``        end to end: ``sdlite generate`` (20 steps, CFG, 512x512, cfg-batch-2 UNet) as a fresh process from
               start to PNG, per variant with nothing cached anywhere (first: NVIDIA's driver compile cache off too),
               with an empty delegate cache (cold), with the cache that run filled (warm),
               and two images in one process (``--num-images 2``: the second image's own time); next to diffusers'
               StableDiffusionPipeline fp32 (TF32 off) and fp16 on the same GPU. Needs the prepare stage's
               unet_b2 and vae_decoder variants and the kit's text encoder (pack.py)
``report``     (alone) only rewrite h200.json / h200.md from the rows already in the work dir

Every row runs in its own process under a timeout derived from ``--deadline-s``, results are merged into
``WORK/results.json`` (so a warm machine keeps rows of earlier calls) and the outputs are rewritten after
every row: a crash, a timeout or the caller's kill loses at most the row in flight.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from sdlite.backends import BackendOptions

from bench.kit import (MODELS, SOURCE_MODEL, Kit, Variant, Work, child_env, elapsed, log, parse_list, python,
                       read_json, start_time, write_json)
from bench.h200_report import derive, markdown

STAGES = ("prepare", "ours", "torch", "cpu", "litert-gpu", "e2e")
E2E_RUNS = ("cold", "warm", "2images")
# "first": an app's very first start: the delegate cache emptied and NVIDIA's own OpenCL compile cache (~/.nv) off, so
# every program is compiled from source; "cold" empties only the delegate cache (a driver may still hold binaries).
E2E_RUN_KINDS = ("first", *E2E_RUNS)
FIRST_RUN_ENV = {"CUDA_CACHE_DISABLE": "1"}
E2E_PROMPT = "a photo of an astronaut riding a horse on mars"
DETAILS = "h200-details.tar.gz"  # with h200.json, h200.md and run.sh's run.log: 4 of the 8 files $OUT may return
PACKAGES = ("ai-edge-litert", "torch", "diffusers", "transformers", "numpy")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=Path(env("H200_MODELS_DIR", ".h200/models")))
    ap.add_argument("--work", type=Path, default=Path(env("H200_WORK", "/tmp/h200-work")))
    ap.add_argument("--out", type=Path, default=Path(env("OUT", "h200-out")))
    ap.add_argument("--models", default=env("H200_MODELS", ""), help="default: every model of the kit")
    ap.add_argument("--variants", default=env("H200_VARIANTS", "plain,fused,fused+wino4"))
    ap.add_argument("--backends", default=env("H200_BACKENDS", "opencl"), help="our delegate's GPU backends")
    ap.add_argument("--stages", default=env("H200_STAGES", ",".join(STAGES)))
    ap.add_argument("--cpu-variants", default=env("H200_CPU_VARIANTS", "plain"))
    ap.add_argument("--torch-device", default=env("H200_TORCH_DEVICE", "cuda"))
    ap.add_argument("--torch-dtypes", default="fp32,fp16")
    ap.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN autotune convs (default off)")
    ap.add_argument("--runs", type=int, default=10, help="timed runs of our rows")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--cpu-runs", type=int, default=3)
    ap.add_argument("--cpu-warmup", type=int, default=1)
    ap.add_argument("--torch-runs", type=int, default=20)
    ap.add_argument("--torch-warmup", type=int, default=5)
    ap.add_argument("--litert-gpu-variants", default=env("H200_LITERT_GPU_VARIANTS", "plain,litert"),
                    help="model variants tried on the stock accelerator (litert = --fuse --target litert)")
    ap.add_argument("--litert-gpu-runs", type=int, default=3)
    ap.add_argument("--litert-gpu-timeout", type=float, default=150.0,
                    help="per model; after one timeout the other models are not attempted")
    ap.add_argument("--profile", choices=("inline", "separate", "off"), default=env("H200_PROFILE", "separate"),
                    help="device profile of our rows: during the timed runs (inline), a second session, or none")
    ap.add_argument("--winograd-profile", default="h200",
                    help="device profile of the graph stages (Winograd planner, auto attention variant)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--row-timeout", type=float, default=float(env("H200_ROW_TIMEOUT", "300")))
    ap.add_argument("--deadline-s", type=float, default=float(env("H200_DEADLINE_S", "510")),
                    help="stop starting rows after this many seconds (the device allows ~9 min per call)")
    ap.add_argument("--e2e-variants", default=env("H200_E2E_VARIANTS", "plain,fused+winoauto"),
                    help="model variants of the end-to-end rows (their unet_b2 / vae_decoder files)")
    ap.add_argument("--e2e-runs", default=env("H200_E2E_RUNS", ",".join(E2E_RUNS)),
                    help="first (empty delegate cache, driver compile cache off), cold (empty delegate cache), warm (the "
                    "cache cold filled), 2images (warm, --num-images 2)")
    ap.add_argument("--e2e-backend", default="opencl")
    ap.add_argument("--e2e-steps", type=int, default=20)
    ap.add_argument("--e2e-prompt", default=E2E_PROMPT)
    ap.add_argument("--pipeline-runs", type=int, default=3, help="diffusers images timed after the warm-up one")
    ap.add_argument("--quick", action="store_true", help="few runs everywhere (tests)")
    ap.add_argument("--fresh", action="store_true", help="forget rows of earlier calls in this work dir")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan and every command a row would run; run nothing, write nothing")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.warmup, args.cpu_runs, args.cpu_warmup = 2, 1, 2, 1
        args.torch_runs, args.torch_warmup, args.litert_gpu_runs, args.pipeline_runs = 3, 1, 2, 1
    return args


def _json_document(stdout: str, log_file: Path) -> Any:
    """The JSON document in ``stdout``: native libraries (the stock GPU accelerator) may print lines before it;
    those are appended to ``log_file``."""
    start = 0 if stdout.startswith("{") else stdout.find("\n{")
    if start < 0:
        raise ValueError(f"no JSON document in the output: {stdout[-300:]!r}")
    start += stdout[start] == "\n"
    if start:
        with open(log_file, "a") as f:
            f.write("stdout before the JSON document:\n" + stdout[:start])
    return json.JSONDecoder().raw_decode(stdout[start:])[0]


def _code_version(kit_git: dict[str, Any]) -> dict[str, Any]:
    """The code's commit: H200_CODE_COMMIT when the caller runs a committed snapshot (the kit's own stamp is from
    when its models were packed), else the kit's stamp."""
    commit = os.environ.get("H200_CODE_COMMIT", "").strip()
    return {"commit": commit, "dirty": False, "kit": kit_git} if commit else kit_git


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


DRY_RUN = False  # --dry-run: commands are printed, not run (set by main)


def _run(cmd: list[str], timeout: float, log_file: Path, stdout_file: Path | None = None,
         env: dict[str, str] | None = None) -> tuple[str, str]:
    """Run ``cmd`` (stdout shared with ours, or to ``stdout_file``; stderr to ``log_file``; ``env`` added to ours):
    ``(status, error)``."""
    if DRY_RUN:
        prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in (env or {}).items())
        log(f"dry run: would run (timeout {timeout:.0f} s): {prefix}{shlex.join(cmd)}")
        return "skipped", "dry run"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "wb") as err, open(stdout_file or os.devnull, "wb") as out:
        try:
            rc = subprocess.run(cmd, stdout=out if stdout_file else None, stderr=err, timeout=timeout,
                                check=False, env={**child_env(), **(env or {})}).returncode
        except subprocess.TimeoutExpired:
            return "timeout", f"killed after {timeout:.0f} s; stderr tail: {_tail(log_file)}"
    if rc == 0:
        return "ok", ""
    if rc < 0:
        return "crashed", f"{_signal_name(rc)}; stderr tail: {_tail(log_file)}"
    return "error", _tail(log_file)


def _tail(path: Path, n: int = 600) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("INFO: ")]
    return " | ".join(lines[-4:])[-n:]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.kit = Kit.load(args.models_dir)
        self.work = Work(args.work)
        self.models = parse_list(args.models, MODELS, "model") if args.models else [
            m for m in MODELS if self.kit.has(m)]
        missing = [m for m in self.models if not self.kit.has(m)]
        if missing:
            raise SystemExit(f"kit has no model {missing[0]!r} (has {sorted(self.kit.doc['models'])})")
        self.variants = [Variant(v).name for v in parse_list(args.variants)]
        self.cpu_variants = [Variant(v).name for v in parse_list(args.cpu_variants)]
        self.litert_gpu_variants = [Variant(v).name for v in parse_list(args.litert_gpu_variants)]
        self.backends = parse_list(args.backends, ("opencl", "gl"), "backend")
        self.e2e_variants = [Variant(v).name for v in parse_list(args.e2e_variants)]
        self.e2e_runs = parse_list(args.e2e_runs, E2E_RUN_KINDS, "e2e run")
        self.stages = [s for s in parse_list(args.stages, (*STAGES, "report"), "stage") if s != "report"]
        self.call_rows: dict[str, str] = {}  # status of the rows of this call
        prev = {} if args.fresh else read_json(self.work.results, {})
        self.results: dict[str, Any] = {"rows": prev.get("rows", {}), "prepare": prev.get("prepare", {}),
                                        "calls": prev.get("calls", [])}
        self.plan = {"models": self.models, "variants": self.variants, "backends": self.backends,
                     "cpu_variants": self.cpu_variants, "litert_gpu_variants": self.litert_gpu_variants,
                     "torch_device": args.torch_device, "profile": args.profile,
                     "e2e_variants": self.e2e_variants, "e2e_runs": self.e2e_runs, "e2e_steps": args.e2e_steps,
                     "e2e_backend": args.e2e_backend, "e2e_prompt": args.e2e_prompt,
                     "seed": args.seed, "winograd_profile": args.winograd_profile,
                     "cpu_threads": BackendOptions(name="cpu").threads,
                     "kit_models": {m: {"precision": self.kit.doc["models"][m].get("precision")} for m in self.models}}

    # ---- bookkeeping -------------------------------------------------------------------------------
    def remaining(self) -> float:
        return self.args.deadline_s - elapsed()

    def budget(self, want: float, floor: float = 15.0) -> float | None:
        """Timeout for the next row, or None when the deadline leaves too little time to start it."""
        left = self.remaining()
        return None if left < floor else min(want, left)

    def record(self, model: str, row: str, data: dict[str, Any]) -> None:
        key = f"{model}|{row}"
        old = self.results["rows"].get(key)
        if data.get("status") == "skipped" and old and old.get("status") == "ok":
            return  # keep a real measurement of an earlier call over "no time this call"
        data = {**data, "model": model, "row": row, "run_at": time.strftime("%Y-%m-%d %H:%M:%S")}
        self.results["rows"][key] = data
        self.call_rows[key] = data.get("status", "?")
        self.save()

    def display_plan(self) -> dict[str, Any]:
        """This call's plan widened by the rows earlier calls left in the work dir (so none is hidden)."""
        plan = {**self.plan, **{k: list(self.plan[k]) for k in ("models", "variants", "backends", "cpu_variants",
                                                                "litert_gpu_variants", "e2e_variants")}}
        for key in self.results["rows"]:
            model, row = key.split("|", 1)
            if model == "e2e":
                # ours-<backend>-<variant>-<run>
                variant = row.removeprefix("ours-").partition("-")[2].rsplit("-", 1)[0] if row.startswith("ours-") else ""
                if variant and variant not in plan["e2e_variants"]:
                    plan["e2e_variants"].append(variant)
                continue
            kind, _, rest = row.partition("-")
            if model not in plan["models"] and model in MODELS:
                plan["models"].append(model)
            if kind == "ours":
                backend, _, variant = rest.partition("-")
                plan["backends"] += [backend] if backend not in plan["backends"] else []
                plan["variants"] += [variant] if variant not in plan["variants"] else []
            elif row.startswith("litert-cpu-") and row[11:] not in plan["cpu_variants"]:
                plan["cpu_variants"].append(row[11:])
            elif row.startswith("litert-gpu-") and row[11:] not in plan["litert_gpu_variants"]:
                plan["litert_gpu_variants"].append(row[11:])
        plan["models"] = [m for m in MODELS if m in plan["models"]]
        plan["variants"].sort(key=self.variants_order)
        plan["cpu_variants"].sort(key=self.variants_order)
        plan["litert_gpu_variants"].sort(key=self.variants_order)
        return plan

    def save(self) -> None:
        if DRY_RUN:
            return
        self.results["env"] = self.env
        self.results["plan"] = plan = self.display_plan()
        write_json(self.work.results, self.results)
        derived = derive(self.results, plan, self.work.root)
        md = markdown(self.results, plan, derived)
        out = self.args.out
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "h200.json", {**self.results, "derived": derived, "kit": self.kit.doc})
        (out / "h200.md").write_text(md)
        self.write_details(out / DETAILS)
        self.markdown = md

    def write_details(self, path: Path) -> None:
        """Per-node profiles, sdlite bench reports and worker logs in ONE tarball: the device returns at most
        8 files from $OUT, with plain names (no '+', as in fused+wino4), at most 2 folders down."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for sub in ("profiles", "reports", "logs"):
                if (self.work.root / sub).is_dir():
                    tar.add(self.work.root / sub, arcname=sub)
            tar.add(self.work.results, arcname="results.json")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(buf.getvalue())
        tmp.replace(path)

    # ---- environment -------------------------------------------------------------------------------
    def collect_env(self) -> None:
        from bench import cl_info

        env: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "python": platform.python_version(),
                               "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                               "config": self.kit.config, "git": _code_version(self.kit.doc.get("git", {})),
                               "command": os.environ.get("H200_COMMAND") or shlex.join([Path(sys.argv[0]).name,
                                                                                        *sys.argv[1:]])}
        try:
            with open("/proc/cpuinfo") as fh:
                env["cpu"] = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), env["cpu"])
        except OSError:
            pass
        env["packages"] = {}
        for p in PACKAGES:
            try:
                env["packages"][p] = metadata.version(p)
            except metadata.PackageNotFoundError:
                pass
        if shutil.which("nvidia-smi"):
            try:
                r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                    "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=False)
                name, driver, mem = [x.strip() for x in r.stdout.strip().splitlines()[0].split(",")][:3]
                env["gpu"] = {"name": name, "driver": driver, "memory": mem}
            except (OSError, subprocess.SubprocessError, IndexError, ValueError) as exc:
                env["gpu"] = {"name": "?", "error": f"nvidia-smi: {exc}"}
        recs, err = cl_info.summary()
        ok = [r for r in recs if "error" not in r]
        env["opencl"] = ({"name": ok[0]["name"], "platform": ok[0]["platform"]["name"],
                          "driver_version": ok[0]["driver_version"], "version": ok[0]["version"],
                          "all": [r.get("name") for r in recs]} if ok else {"error": err or "no OpenCL device"})
        self.env = env
        self.results["calls"].append({"started": env["date"], "command": env["command"], "stages": self.stages,
                                      "models": self.models})
        log(f"GPU: {env.get('gpu', {}).get('name', 'none (nvidia-smi missing)')}; OpenCL: "
            f"{env['opencl'].get('name', env['opencl'].get('error'))}; packages {env['packages']}")

    # ---- stages ------------------------------------------------------------------------------------
    def worker(self, *args: str) -> list[str]:
        return [python(), "-m", "bench.worker", *args]

    def stage_prepare(self, model: str) -> None:
        timeout = self.budget(self.args.row_timeout * 2, floor=30)
        if timeout is None:
            log(f"prepare {model}: skipped (deadline)")
            return
        out = self.work.root / "rows" / f"{model}-prepare.json"
        out.unlink(missing_ok=True)
        e2e = self.e2e_variants if "e2e" in self.stages and model in ("unet_b2", "vae_decoder") else []
        wanted = sorted(set(self.variants) | set(self.cpu_variants) | set(self.litert_gpu_variants) | set(e2e),
                        key=self.variants_order)
        status, error = _run(self.worker(
            "prepare", "--name", model, "--skeleton", str(self.kit.skeleton(model)), "--variants", ",".join(wanted),
            "--winograd-profile", self.args.winograd_profile, "--seed", str(self.args.seed),
            "--work", str(self.work.root), "--out", str(out)),
            timeout, self.work.root / "logs" / f"{model}-prepare.err")
        data = read_json(out, {}) if status == "ok" else {}
        self.results["prepare"][model] = {"status": status, "error": error, **data}
        if status != "ok":
            log(f"prepare {model}: {status}: {error}")
        self.save()

    @staticmethod
    def variants_order(v: str) -> tuple[int, str]:
        base = Variant(v).model_name  # a "+tc" row right after its model file's row
        return (0 if base == "plain" else 1 if base == "fused" else 2, v)

    def tflite_row(self, model: str, row: str, variant: str, backend: str, runs: int, warmup: int,
                   profile: str) -> None:
        path = self.work.model(model, Variant(variant))
        if not path.is_file() and not DRY_RUN:
            self.record(model, row, {"status": "error", "error": f"{path} missing (prepare stage failed or not run)"})
            return
        timeout = self.budget(self.args.row_timeout)
        if timeout is None:
            self.record(model, row, {"status": "skipped", "error": "deadline"})
            return
        out = self.work.root / "rows" / f"{model}-{row}.json"
        out.unlink(missing_ok=True)
        t0 = time.monotonic()
        status, error = _run(self.worker(
            "tflite", "--model", str(path), "--backend", backend, "--name", model, "--row", row,
            "--work", str(self.work.root), "--runs", str(runs), "--warmup", str(warmup), "--profile", profile,
            "--delegate-options", Variant(variant).delegate_options, "--out", str(out)),
            timeout, self.work.root / "logs" / f"{model}-{row}.err")
        data = read_json(out, {}) if status == "ok" else {}
        if status != "ok":
            log(f"{model} {row}: {status}: {error}")
        self.record(model, row, {"status": status, "error": error, "seconds": round(time.monotonic() - t0, 1),
                                 "variant": variant, **data})

    def stage_ours(self, model: str) -> None:
        for backend in self.backends:
            for v in self.variants:
                self.tflite_row(model, f"ours-{backend}-{v}", v, backend, self.args.runs, self.args.warmup,
                                self.args.profile)

    def stage_cpu(self, model: str) -> None:
        for v in self.cpu_variants:
            self.tflite_row(model, f"litert-cpu-{v}", v, "cpu", self.args.cpu_runs, self.args.cpu_warmup, "off")

    def stage_litert_gpu(self, model: str) -> None:
        for v in self.litert_gpu_variants:
            self.litert_gpu_row(model, v)

    def litert_gpu_row(self, model: str, variant: str) -> None:
        row = f"litert-gpu-{variant}"
        path = self.work.model(model, Variant(variant))
        timed_out = [m for m in self.models if m != model and self.call_rows.get(f"{m}|{row}") == "timeout"]
        if timed_out:
            self.record(model, row, {"status": "skipped", "error": f"the attempt on {timed_out[0]} timed out"})
            return
        timeout = self.budget(self.args.litert_gpu_timeout)
        if (not path.is_file() and not DRY_RUN) or timeout is None:
            self.record(model, row, {"status": "skipped" if timeout is None else "error",
                                     "error": "deadline" if timeout is None else f"{path} missing"})
            return
        log(f"{model} {row}: sdlite bench --backend litert-gpu (timeout {timeout:.0f} s)")
        cmd = [python(), "-m", "sdlite", "bench", str(path), "--backend", "litert-gpu", "--num_runs",
               str(self.args.litert_gpu_runs), "--warmup_runs", "1", "--json"]
        if DRY_RUN:
            _run(cmd, timeout, Path(os.devnull))
            return
        t0 = time.monotonic()
        err_file = self.work.root / "logs" / f"{model}-{row}.err"
        err_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(err_file, "wb") as err:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, timeout=timeout, check=False)
            rc, stdout = r.returncode, r.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired:
            rc, stdout = None, ""
        seconds = round(time.monotonic() - t0, 1)
        if rc == 0:
            res = _json_document(stdout, err_file)["results"][0]
            data = {"status": "ok", **{k: res[k] for k in ("timings_us", "placement", "load_s", "first_run_us")}}
        elif rc is None:
            data = {"status": "timeout", "error": f"no result after {timeout:.0f} s; {_tail(err_file)}"}
        elif rc < 0:
            data = {"status": "crashed", "error": f"{_signal_name(rc)}; {_tail(err_file)}"}
        else:
            data = {"status": "error", "error": _tail(err_file)}
        detail = (f": {data['error']}" if data.get("error") else
                  f", {data['timings_us']['median'] / 1e3:.1f} ms; {data['placement']}")
        log(f"{model} {row}: {data['status']}{detail}")
        self.record(model, row, {**data, "seconds": seconds, "command": shlex.join(cmd)})

    def stage_torch(self) -> None:
        by_source: dict[str, dict[str, dict[str, list[int]]]] = {}
        for model in self.models:
            shapes = {i["name"]: i["shape"] for i in self.kit.inputs(model)}
            by_source.setdefault("unet" if SOURCE_MODEL[model] == "unet" else "vae_decoder", {})[model] = shapes

        for source, shapes in by_source.items():
            timeout = self.budget(self.args.row_timeout)
            if timeout is None:
                for m in shapes:
                    for dt in self.args.torch_dtypes.split(","):
                        self.record(m, f"torch-{dt}", {"status": "skipped", "error": "deadline"})
                continue
            out = self.work.root / "rows" / f"torch-{source}.json"
            out.unlink(missing_ok=True)
            t0 = time.monotonic()
            cmd = self.worker("torch", "--config", self.kit.config, "--source", source, "--shapes", json.dumps(shapes),
                              "--device", self.args.torch_device, "--dtypes", self.args.torch_dtypes,
                              "--runs", str(self.args.torch_runs), "--warmup", str(self.args.torch_warmup),
                              "--seed", str(self.args.seed), "--out", str(out))
            if self.args.cudnn_benchmark:
                cmd.append("--cudnn-benchmark")
            status, error = _run(cmd, timeout, self.work.root / "logs" / f"torch-{source}.err")
            data = read_json(out, {}) if status == "ok" else {}
            self.results.setdefault("torch_env", {})[source] = data.get("env")
            for m in shapes:
                for dt in self.args.torch_dtypes.split(","):
                    row = data.get("rows", {}).get(f"{m}|torch-{dt}") or {"status": status, "error": error}
                    self.record(m, f"torch-{dt}", {**row, "seconds": round(time.monotonic() - t0, 1),
                                                   "peak_memory_mb": data.get("rows", {}).get("_peak_memory_mb")})

    def stage_e2e(self) -> None:
        """The end-to-end rows (module docstring): per variant, fresh `sdlite generate` processes timed from spawn to
        exit, each reporting its own start-up timeline (process start to PNG) and its delegates' set-up stats."""
        if not self.kit.doc.get("e2e"):
            self.record("e2e", "prepare", {"status": "error", "error": "the kit has no end-to-end folder (prepare.sh "
                                           "with a --b2 conversion made with --models text_encoder,unet,vae_decoder)"})
            return
        timeout = self.budget(self.args.row_timeout, floor=30)
        if timeout is None:
            self.record("e2e", "prepare", {"status": "skipped", "error": "deadline"})
            return
        out = self.work.root / "rows" / "e2e-prepare.json"
        out.unlink(missing_ok=True)
        status, error = _run(self.worker(
            "prepare-e2e", "--kit", str(self.kit.root), "--work", str(self.work.root), "--variants",
            ",".join(self.e2e_variants), "--winograd-profile", self.args.winograd_profile, "--seed",
            str(self.args.seed), "--out", str(out)), timeout, self.work.root / "logs" / "e2e-prepare.err")
        folders = (read_json(out, {}) or {}).get("variants", {}) if status == "ok" else {}
        self.record("e2e", "prepare", {"status": status, "error": error, "variants": folders})
        for v in self.e2e_variants:
            for run in self.e2e_runs:
                self.e2e_row(v, run, folders.get(v, {}) if not DRY_RUN else {"status": "ok"})
        self.pipeline_rows()

    def e2e_row(self, variant: str, run: str, folder: dict[str, Any]) -> None:
        row = f"ours-{self.args.e2e_backend}-{variant}-{run}"
        if folder.get("status") != "ok":
            self.record("e2e", row, {"status": "error", "error": folder.get("error", "no end-to-end folder")})
            return
        timeout = self.budget(self.args.row_timeout)
        if timeout is None:
            self.record("e2e", row, {"status": "skipped", "error": "deadline"})
            return
        root = self.work.root / "e2e"
        cache = root / "cache" / Variant(variant).model_name
        if run in ("first", "cold") and not DRY_RUN:  # an empty delegate cache; warm and 2images reuse what cold stored
            shutil.rmtree(cache, ignore_errors=True)
        png = root / "out" / f"{Variant(variant).model_name}-{run}.png"
        options = ";".join(o for o in (f"cache_dir:{cache}", Variant(variant).delegate_options) if o)
        cmd = [python(), "-m", "sdlite", "generate", str(root / Variant(variant).model_name), "-p",
               self.args.e2e_prompt, "--steps", str(self.args.e2e_steps), "--seed", str(self.args.seed), "--backend",
               self.args.e2e_backend, "--json", "--no-progress", "-o", str(png), "--delegate_options", options]
        if run == "2images":
            cmd += ["--num-images", "2"]
        out = self.work.root / "rows" / f"e2e-{row}.json"
        out.unlink(missing_ok=True)
        if not DRY_RUN:  # a dry run writes nothing
            png.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        status, error = _run(cmd, timeout, self.work.root / "logs" / f"e2e-{row}.err", stdout_file=out,
                             env=FIRST_RUN_ENV if run == "first" else None)
        wall = time.monotonic() - t0
        data: dict[str, Any] = {"status": status, "error": error, "variant": variant, "run": run,
                                "command": shlex.join(cmd), "wall_s": round(wall, 3)}
        if status == "ok":
            try:
                data.update(e2e_summary(json.loads(out.read_text())))
            except (ValueError, KeyError, TypeError) as exc:
                data.update(status="error", error=f"unreadable sdlite generate --json output: {exc}")
        if data["status"] == "ok":
            log(f"e2e {row}: PNG at {data.get('png_s')} s after process start (process wall {wall:.2f} s)"
                + (f"; second image {data['second_image_s']:.3f} s" if data.get("second_image_s") else ""))
        else:
            log(f"e2e {row}: {data['status']}: {data['error']}")
        self.record("e2e", row, data)

    def pipeline_rows(self) -> None:
        """diffusers' StableDiffusionPipeline, whole images, fp32 and fp16 (rows e2e|diffusers-DTYPE)."""
        timeout = self.budget(self.args.row_timeout)
        dtypes = self.args.torch_dtypes.split(",")
        if timeout is None:
            for dt in dtypes:
                self.record("e2e", f"diffusers-{dt}", {"status": "skipped", "error": "deadline"})
            return
        out = self.work.root / "rows" / "e2e-diffusers.json"
        out.unlink(missing_ok=True)
        t0 = time.monotonic()
        status, error = _run(self.worker(
            "pipeline", "--config", self.kit.config, "--assets", str(self.work.root / "e2e" / "assets"), "--device",
            self.args.torch_device, "--dtypes", self.args.torch_dtypes, "--prompt", self.args.e2e_prompt, "--steps",
            str(self.args.e2e_steps), "--runs", str(self.args.pipeline_runs), "--seed", str(self.args.seed), "--out",
            str(out)), timeout, self.work.root / "logs" / "e2e-diffusers.err")
        data = read_json(out, {}) if status == "ok" else {}
        for dt in dtypes:
            row = data.get("rows", {}).get(f"diffusers-{dt}") or {"status": status, "error": error}
            self.record("e2e", f"diffusers-{dt}", {**row, "env": data.get("env"),
                                                   "seconds": round(time.monotonic() - t0, 1)})

    # ---- driver ------------------------------------------------------------------------------------
    def run(self) -> str:
        self.collect_env()
        self.save()
        log(f"plan: models {self.models}, variants {self.variants}, backends {self.backends}, stages {self.stages}, "
            f"deadline {self.args.deadline_s:.0f} s"
            + (f"; e2e variants {self.e2e_variants}, runs {self.e2e_runs}" if "e2e" in self.stages else ""))
        for stage in self.stages:
            log(f"== stage {stage}")
            steps = [(stage, self.stage_torch)] if stage == "torch" else [(stage, self.stage_e2e)] if stage == "e2e" else [
                (f"{stage} {model}", partial(getattr(self, f"stage_{stage.replace('-', '_')}"), model))
                for model in self.models]
            for what, step in steps:
                try:
                    step()
                except Exception:  # noqa: BLE001 - a bug in one step must not cost the others their rows
                    log(f"{what}: FAILED in bench.py itself:\n{traceback.format_exc()}")
                    self.results.setdefault("bench_errors", []).append(f"{what}: {traceback.format_exc(limit=3)}")
        self.save()
        if DRY_RUN:
            log("dry run: nothing was run or written")
            return ""
        log(f"done in {elapsed():.0f} s; wrote {self.args.out / 'h200.json'} and {self.args.out / 'h200.md'}")
        return self.markdown


def e2e_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """What an end-to-end row keeps of `sdlite generate --json`: when each PNG was written (seconds since the process
    started), when the models were loaded and when their warm-ups (the delegates' set-up, all at once) were done, the
    first image's stage timings, the second image's own time, and per model its load, first and second call and its
    delegate's set-up stats."""
    startup = doc["startup"]
    marks = startup["timeline"]
    t = doc["timings"]
    images = doc.get("image_s") or []
    return {
        "png_s": marks.get("png_0"), "png2_s": marks.get("png_1"), "process_start_known": marks.get("process_start_known"),
        "main_s": marks.get("main"), "imports_done_s": marks.get("imports_done"),
        "models_loaded_s": marks.get("models_loaded"), "models_ready_s": marks.get("models_ready"),
        "first_image_s": images[0] if images else t.get("total_s"),
        "second_image_s": images[1] if len(images) > 1 else None,
        "text_encoder_s": t.get("text_encoder_s"), "unet_first_step_s": t.get("unet_first_step_s"),
        "unet_step_steady_mean_s": t.get("unet_step_steady_mean_s"), "unet_setup_s": t.get("unet_setup_s"),
        "vae_decode_s": (t.get("vae_decode_s") or [None])[0],
        "second_image": (doc.get("image_timings") or [None, None])[1],
        "models": startup.get("models", {}), "placement": doc.get("placement"),
    }


def main(argv: list[str] | None = None) -> int:
    global DRY_RUN
    start_time()  # fixes H200_T0 (unless run.sh did) before any worker starts
    args = parse_args(argv)
    DRY_RUN = args.dry_run
    md = Bench(args).run()
    if md:
        print()
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
