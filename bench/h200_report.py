"""The markdown for BENCHMARKS.md and the derived numbers (parity, ratios, targets) of an H200 run.

Every number comes from ``results.json`` rows of one work dir; rows from earlier calls of the same warm
machine are included and each row says when it ran. Times are medians over the timed runs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.kit import MODELS, TITLES, Variant

BACKEND_TITLES = {"opencl": "OpenCL", "gl": "GL ES 3.1"}
TARGET_MS = {"unet_b1": 126.0}  # issue #5: PyTorch fp32 UNet step on the H200 (measured in this run if present)


def _setup_cell(d: dict) -> str:
    """``pack / upload / tune`` host ms of the delegate's set-up (stats setup_*_us), or ``-``."""
    keys = ("setup_weights_host_us", "setup_weights_upload_us", "setup_tuning_us")
    if any(d.get(k, -1) < 0 for k in keys):
        return "-"
    return " / ".join(f"{d[k] / 1e3:.0f}" for k in keys)


def row_ids(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """``(row id, label)`` in table order for the run plan (backends, variants, cpu variants)."""
    out = []
    for backend in plan["backends"]:
        for v in plan["variants"]:
            out.append((f"ours-{backend}-{v}", f"ours {BACKEND_TITLES.get(backend, backend)}, {Variant(v).title}"))
    threads = plan.get("cpu_threads", "all")
    for v in plan["cpu_variants"]:
        suffix = "" if v == "plain" else f", {Variant(v).title}"
        out.append((f"litert-cpu-{v}", f"LiteRT CPU (XNNPACK, {threads} threads){suffix}"))
    for v in plan.get("litert_gpu_variants", ["plain"]):
        suffix = "" if v == "plain" else f", {Variant(v).title}"
        out.append((f"litert-gpu-{v}", f"LiteRT GPU (stock accelerator){suffix}"))
    dev = "CUDA" if plan.get("torch_device", "cuda").startswith("cuda") else plan.get("torch_device", "cpu").upper()
    out.append(("torch-fp32", f"PyTorch {dev} fp32 (TF32 off)"))
    out.append(("torch-fp16", f"PyTorch {dev} fp16"))
    return out


def median_ms(row: dict[str, Any] | None) -> float | None:
    if not row or row.get("status") != "ok":
        return None
    if "median_ms" in row:
        return float(row["median_ms"])
    t = row.get("timings_us", {})
    return float(t.get("median") or t.get("avg")) / 1e3 if t else None


def parity(work_outputs: Path, a: str, b: str) -> dict[str, Any] | None:
    """``||a-b|| / ||b||`` over all outputs of two rows' saved npz files (None if either is missing)."""
    fa, fb = work_outputs / f"{a}.npz", work_outputs / f"{b}.npz"
    if not fa.is_file() or not fb.is_file():
        return None
    with np.load(fa) as xa, np.load(fb) as xb:
        if sorted(xa.files) != sorted(xb.files) or any(xa[k].shape != xb[k].shape for k in xb.files):
            return {"error": f"outputs differ in names/shapes ({sorted(xa.files)} vs {sorted(xb.files)})"}
        x = np.concatenate([xa[k].astype(np.float64).ravel() for k in sorted(xb.files)])
        y = np.concatenate([xb[k].astype(np.float64).ravel() for k in sorted(xb.files)])
    den = float(np.linalg.norm(y))
    return {"rel": float(np.linalg.norm(x - y)) / den if den > 0 else float("nan"),
            "max_abs": float(np.max(np.abs(x - y))) if x.size else 0.0, "reference": b,
            "finite": bool(np.isfinite(x).all())}


def derive(results: dict[str, Any], plan: dict[str, Any], work_root: Path) -> dict[str, Any]:
    """Parity per our row, ratios per model, target checks."""
    rows = results.get("rows", {})
    out: dict[str, Any] = {"parity": {}, "ratios": {}, "targets": {}}
    for model in plan["models"]:
        outputs = work_root / "outputs" / model
        for backend in plan["backends"]:
            for v in plan["variants"]:
                rid = f"ours-{backend}-{v}"
                ok = {r for r in (rid, f"litert-cpu-{v}", "litert-cpu-plain")
                      if (rows.get(f"{model}|{r}") or {}).get("status") == "ok"}  # never a stale npz
                ref = f"litert-cpu-{v}" if f"litert-cpu-{v}" in ok else "litert-cpu-plain"
                if rid not in ok or ref not in ok:
                    continue
                p = parity(outputs, rid, ref)
                if p is not None:
                    out["parity"][f"{model}|{rid}"] = p
        ms = {rid: median_ms(rows.get(f"{model}|{rid}")) for rid, _ in row_ids(plan)}
        ratios: dict[str, dict[str, Any]] = {}
        for backend in plan["backends"]:
            for v in plan["variants"]:
                t = ms.get(f"ours-{backend}-{v}")
                for b in _bases(plan, v):
                    if ms.get(f"ours-{backend}-{b}") and t:
                        ratios[f"ours {backend}: {v} / {Variant(b).title}"] = {"ratio": t / ms[f"ours-{backend}-{b}"]}
        ours = {rid: t for rid, t in ms.items() if rid.startswith("ours-") and t}
        out["ratios"][model] = ratios
        if not ours:
            continue
        best = min(ours, key=ours.get)
        for ref in ("torch-fp32", "torch-fp16"):
            if ms.get(ref):
                ratios[f"best ours / PyTorch {ref.split('-')[1]}"] = {"ratio": ours[best] / ms[ref], "best": best}
        if model in TARGET_MS:  # measured PyTorch fp32 of this run when there is one, else the number
            target, source = (ms["torch-fp32"], "PyTorch fp32 measured") if ms.get("torch-fp32") else (
                TARGET_MS[model], "issue #5")
            out["targets"][f"{model}: best ours <= PyTorch fp32"] = {
                "best": best, "ms": ours[best], "target_ms": target, "target_source": source,
                "met": ours[best] <= target}
        for backend in plan["backends"]:
            for v in plan["variants"]:
                for b in _bases(plan, v) if Variant(v).winograd != "off" else []:
                    base = ms.get(f"ours-{backend}-{b}")
                    if base and ms.get(f"ours-{backend}-{v}"):
                        speedup = base / ms[f"ours-{backend}-{v}"]
                        out["targets"][f"{model}: {v} >= 2x faster than {Variant(b).title} ({backend})"] = {
                            "speedup": speedup, "met": speedup >= 2.0}
    out["e2e_targets"] = derive_e2e(rows, plan)
    for key, p in out["parity"].items():
        if key.startswith("unet") and "rel" in p:
            out["targets"][f"{key.split('|')[0]}: parity {key.split('|')[1]} <= 1e-3"] = {
                "rel": p["rel"], "met": bool(p["rel"] <= 1e-3)}
    return out


# Issue #31's measurement before the persistent cache (H100, fused + Winograd auto and unfused, cfg batch 2, 20 steps,
# process start to PNG) and its acceptance targets for the fused + Winograd auto model.
E2E_BEFORE_S = {"plain": 10.9, "fused+winoauto": 10.9}
E2E_TARGETS_S = {"warm": 2.0, "cold": 4.0, "second_image": 0.75}


def e2e_png_s(row: dict[str, Any] | None) -> float | None:
    """Process start to the first PNG (the process's own timeline), else the process's wall time."""
    if not row or row.get("status") != "ok":
        return None
    return float(row["png_s"]) if row.get("png_s") is not None and row.get("process_start_known") else float(
        row["wall_s"])


def derive_e2e(rows: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """Targets of the end-to-end rows (issue #31 acceptance 1 and 2)."""
    backend = plan.get("e2e_backend", "opencl")
    get = lambda v, run: rows.get(f"e2e|ours-{backend}-{v}-{run}")  # noqa: E731
    fp16 = rows.get("e2e|diffusers-fp16") or {}
    targets: dict[str, dict[str, Any]] = {}
    for v in plan.get("e2e_variants", []):
        for run in ("warm", "cold"):
            t = e2e_png_s(get(v, run))
            if t is not None and v in E2E_BEFORE_S:
                targets[f"e2e {v}: {run} start to PNG below issue #31's {E2E_BEFORE_S[v]} s"] = {
                    "s": t, "before_s": E2E_BEFORE_S[v], "met": t < E2E_BEFORE_S[v]}
            if t is not None and Variant(v).winograd == "auto":
                targets[f"e2e {v}: {run} start to PNG <= {E2E_TARGETS_S[run]} s"] = {
                    "s": t, "target_s": E2E_TARGETS_S[run], "met": t <= E2E_TARGETS_S[run]}
        second = (get(v, "2images") or {}).get("second_image_s")
        if second is not None and Variant(v).winograd == "auto":
            targets[f"e2e {v}: second image <= {E2E_TARGETS_S['second_image']} s"] = {
                "s": second, "target_s": E2E_TARGETS_S["second_image"], "met": second <= E2E_TARGETS_S["second_image"]}
            if fp16.get("status") == "ok":
                targets[f"e2e {v}: second image faster than diffusers fp16"] = {
                    "s": second, "diffusers_fp16_s": fp16["image_s"], "met": second < fp16["image_s"]}
    fused = next((v for v in plan.get("e2e_variants", []) if Variant(v).winograd == "auto"), None)
    if fused and "plain" in plan.get("e2e_variants", []):
        for run in ("cold", "warm"):
            a, b = e2e_png_s(get(fused, run)), e2e_png_s(get("plain", run))
            if a is not None and b is not None:
                targets[f"e2e {fused} no later to its first image than unfused ({run})"] = {
                    "s": a, "unfused_s": b, "met": a <= b}
    return targets


def _e2e_lines(rows: dict[str, Any], plan: dict[str, Any], targets: dict[str, Any]) -> list[str]:
    backend = plan.get("e2e_backend", "opencl")
    keyed = {k.split("|", 1)[1]: r for k, r in rows.items() if k.startswith("e2e|")}
    if not any(k.startswith(("ours-", "diffusers-")) for k in keyed):
        return []
    f = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
    lines = ["", f"End to end: `sdlite generate` {plan.get('e2e_steps', 20)} steps, CFG 7.5, PNDM, one image, as a fresh "
             f"process ({backend}); first = nothing cached anywhere (delegate cache empty, NVIDIA's driver compile "
             "cache off: every kernel compiled from source), cold = empty delegate cache, warm = the cache the cold run filled, 2 images = "
             "warm, `--num-images 2` (the second image's own time). Start to PNG: seconds from the process's start "
             "(its /proc timeline: Python start-up and imports included) to the PNG written.", "",
             "| Implementation | run | start to PNG s | process wall s | imports s | models loaded s | text encoder s | "
             "UNet first step s | UNet step s | VAE decode s | second image s | cache hits (program / tiles) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for v in plan.get("e2e_variants", []):
        for run in plan.get("e2e_runs", ["cold", "warm", "2images"]):
            r = keyed.get(f"ours-{backend}-{v}-{run}")
            if r is None:
                continue
            if r.get("status") != "ok":
                lines.append(f"| ours, {Variant(v).title} | {run} | {r.get('status')} | | | | | | | | | |")
                continue
            hits = [0, 0]
            misses = [0, 0]
            for m in (r.get("models") or {}).values():
                d = (m or {}).get("delegate") or {}
                for i, kind in enumerate(("program", "tiles")):
                    hits[i] += (d.get("cache_hits") or {}).get(kind, 0)
                    misses[i] += (d.get("cache_misses") or {}).get(kind, 0)
            lines.append(f"| ours, {Variant(v).title} | {run} | {f(e2e_png_s(r))} | {f(r.get('wall_s'))} | "
                         f"{f(r.get('imports_done_s'))} | {f(r.get('models_loaded_s'))} | {f(r.get('text_encoder_s'), 3)} | "
                         f"{f(r.get('unet_first_step_s'), 3)} | {f(r.get('unet_step_steady_mean_s'), 4)} | "
                         f"{f(r.get('vae_decode_s'), 3)} | {f(r.get('second_image_s'), 3)} | "
                         f"{hits[0]}/{hits[0] + misses[0]} / {hits[1]}/{hits[1] + misses[1]} |")
    for dt in ("fp32", "fp16"):
        r = keyed.get(f"diffusers-{dt}")
        if r is None:
            continue
        cell = (f"first image {f(r.get('first_image_s'))}, then {f(r.get('image_s'), 3)} s per image"
                if r.get("status") == "ok" else f"{r.get('status')}: {str(r.get('error', ''))[:120]}")
        lines.append(f"| diffusers StableDiffusionPipeline {dt}{' (TF32 off)' if dt == 'fp32' else ''} | in process | "
                     f"{cell} | | | | | | | | {f(r.get('image_s'), 3) if r.get('status') == 'ok' else '-'} | |")
    setup = []
    for v in plan.get("e2e_variants", []):
        for run in ("first", "cold", "warm"):
            r = keyed.get(f"ours-{backend}-{v}-{run}")
            for name, m in ((r or {}).get("models") or {}).items() if (r or {}).get("status") == "ok" else []:
                d = (m or {}).get("delegate") or {}
                phases = ", ".join(f"{k} {ms / 1e3:.2f}" for k, ms in (d.get("setup_phases_ms") or {}).items())
                setup.append(f"| {Variant(v).title} | {run} | {name} | {f(m.get('delegate_s'), 3)} | "
                             f"{f(m.get('load_s'), 3)} | {f(m.get('first_call_s'), 3)} | {f(m.get('second_call_s'), 4)} "
                             f"| {phases or '-'} | {d.get('weights_on_device', '-')} / {d.get('weights_on_host', '-')} "
                             f"| {d.get('tiles_tuned', '-')} / {d.get('tiles_from_cache', '-')} / "
                             f"{d.get('tiles_untuned', '-')} |")
    if setup:
        lines += ["", "Where the first image's time went, per model (delegate stats; phases in seconds: compiling "
                  "kernels, preparing weights, first inference):", "",
                  "| variant | run | model | delegate s | load s | first call s | second call s | set-up phases s | "
                  "weights on device / host | GEMM shapes tuned / from cache / cost model |",
                  "|---|---|---|---:|---:|---:|---:|---|---|---|", *setup]
    if targets:
        lines += ["", "Targets (issue #31):", ""]
        for k, t in targets.items():
            detail = ", ".join(f"{a}={b:.4g}" if isinstance(b, float) else f"{a}={b}" for a, b in t.items() if a != "met")
            lines.append(f"- {k}: {'met' if t['met'] else 'NOT met'} ({detail})")
    failures = [f"- e2e {k}: {r.get('status')}: {str(r.get('error', ''))[:300]}" for k, r in keyed.items()
                if r.get("status") not in ("ok", None)]
    if failures:
        lines += ["", "End-to-end failures:", "", *failures]
    return lines


def _bases(plan: dict[str, Any], v: str) -> list[str]:
    """The unfused rows a variant's ratio is taken against: ``plain``, and for a ``+tc`` fused variant also
    ``plain+tc`` when the run has it (the same option on both sides)."""
    if Variant(v).model_name == "plain":
        return []
    suffix = Variant(v).suffix
    return ["plain"] + ([f"plain{suffix}"] if suffix and f"plain{suffix}" in plan["variants"] else [])


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    status = row.get("status")
    if status == "ok":
        text = f"{median_ms(row):.1f}"
        if "fully accelerated: no" in str(row.get("placement", "")):
            text += " (CPU fallback)"
        return text
    return {"error": "error", "timeout": "timeout", "crashed": "crashed", "skipped": "skipped"}.get(status, str(status))


def _fmt_ratio(r: dict[str, Any] | None) -> str:
    if not r:
        return "-"
    x = r["ratio"]
    speed = f"{1 / x:.2f}x faster" if x < 1 else f"{x:.2f}x slower"
    best = f"; {r['best'].removeprefix('ours-')}" if "best" in r else ""
    return f"{x:.2f} ({speed}{best})"


def markdown(results: dict[str, Any], plan: dict[str, Any], derived: dict[str, Any]) -> str:
    env = results.get("env", {})
    rows = results.get("rows", {})
    models = [m for m in MODELS if m in plan["models"]]
    gpu = env.get("gpu", {})
    config = {"sd15": "SD1.5"}.get(env.get("config", ""), env.get("config", "?"))
    precision = "/".join(sorted({str(m.get("precision")) for m in plan.get("kit_models", {}).values()})) or "?"
    lines = [f"### {config} random-weight {precision} on {gpu.get('name', env.get('opencl', {}).get('name', '?'))} "
             f"({env.get('date', '?')})", ""]
    lines.append(f"- Command: `{env.get('command', '?')}`")
    if gpu:
        lines.append(f"- GPU: {gpu.get('name')} (driver {gpu.get('driver')}, {gpu.get('memory')})")
    cl = env.get("opencl", {})
    lines.append(f"- OpenCL: {cl.get('name', cl.get('error', '?'))}"
                 + (f" ({cl.get('platform')}, driver {cl.get('driver_version')})" if "name" in cl else ""))
    packages = ", ".join(f"{k} {v}" for k, v in env.get("packages", {}).items())
    lines.append(f"- CPU: {env.get('cpu', '?')} ({env.get('cpu_count', '?')} cores); "
                 f"python {env.get('python', '?')}; {packages}")
    git = env.get("git", {})
    lines.append(f"- Code: commit {str(git.get('commit', '?'))[:12]}{' (dirty)' if git.get('dirty') else ''}; "
                 f"models: {env.get('config', '?')} config, random weights N(0, 0.02) refilled with seed "
                 f"{plan.get('seed', 0)}; device profile {plan.get('winograd_profile')} (Winograd plan, attention variant)")
    calls = results.get("calls", [])
    if len(calls) > 1:
        lines.append(f"- Rows merged from {len(calls)} calls on the same machine ({calls[0].get('started')} .. "
                     f"{calls[-1].get('started')}); each row's `run_at` is in h200.json")
    lines.append("")
    head = "| Implementation | " + " | ".join(f"{TITLES[m]} (ms)" for m in models) + " |"
    lines += [head, "|---|" + "---:|" * len(models)]
    for rid, label in row_ids(plan):
        cells = [_cell(rows.get(f"{m}|{rid}")) for m in models]
        if all(c == "-" for c in cells):
            continue
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    profiled = ("with the delegate profiling every kernel (device events) during timing"
                if plan.get("profile") == "inline" else "without device profiling")
    clock = "CUDA events" if plan.get("torch_device", "cuda").startswith("cuda") else "perf_counter"
    lines.append(f"Median of the timed runs after warm-up. Ours and LiteRT: wall time of `invoke` measured by "
                 f"`sdlite bench` (bench_target), inputs set once; our rows {profiled}. "
                 f"PyTorch: diffusers modules of the same config, {clock} per call.")
    ratio_rows = []
    keys = list(dict.fromkeys(k for m in models for k in derived["ratios"].get(m, {})))
    for k in keys:
        cells = [derived["ratios"].get(m, {}).get(k) for m in models]
        ratio_rows.append(f"| {k} | " + " | ".join(_fmt_ratio(c) for c in cells) + " |")
    if ratio_rows:
        lines += ["", "Time ratios (same machine, same model files):", "", "| Ratio | " + " | ".join(TITLES[m] for m in models) + " |",
                  "|---|" + "---:|" * len(models), *ratio_rows]
    mem = []
    for m in models:
        for rid, label in row_ids(plan):
            r = rows.get(f"{m}|{rid}")
            if not rid.startswith("ours-") or not r or r.get("status") != "ok":
                continue
            d = r.get("device") or {}
            p = derived["parity"].get(f"{m}|{rid}", {})
            rel = f"{p['rel']:.2e} vs {p['reference']}" if "rel" in p else p.get("error", "-")
            mem.append(f"| {TITLES[m]} | {label} | {d.get('partitions', '?')} | {d.get('cpu_nodes', '?')} | "
                       f"{d.get('arena_mb', 0):.1f} | {d.get('weight_mb', 0):.1f} | {rel} | "
                       f"{r.get('load_s', 0):.1f} | {r.get('first_run_us', 0) / 1e3:.0f} | {_setup_cell(d)} |")
    if mem:
        src = next((r.get("device", {}).get("weight_source") for r in rows.values()
                    if isinstance(r, dict) and r.get("device")), "?")
        lines += ["", "Delegate memory, placement and parity (rel = ||ours - ref|| / ||ref|| on the same inputs):", "",
                  "| Model | Implementation | partitions | CPU nodes | arena MB | GPU weights MB | parity | load s "
                  "| first run ms | set-up ms: pack / upload / tune |", "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
                  *mem, "",
                  f"Arena: the delegate's planned intermediate buffer (stats max_arena_bytes). GPU weights: {src}. "
                  "Set-up: the delegate's host time packing / transforming weights, uploading them and tuning GEMM "
                  "tiles (stats setup_*_us; at load and in the first run)."]
    top = []
    for m in models:
        for rid, label in row_ids(plan):
            r = rows.get(f"{m}|{rid}")
            prof = (r or {}).get("profile")
            if not prof or r.get("status") != "ok":
                continue
            for i, o in enumerate(prof.get("top", [])[:5], 1):
                top.append(f"| {TITLES[m]} | {label} | {i} | {o['op']} | {o['node']} | {o['avg_ms']:.3f} | "
                           f"{o['pct']:.1f}% |")
            top.append(f"| {TITLES[m]} | {label} | sum | all {prof['nodes_timed']} nodes | | "
                       f"{prof['total_ms']:.2f} | 100% |")
    if top:
        lines += ["", "Slowest five ops per implementation (delegate device profile, averaged over the timed runs; "
                  "a multi-launch node sums all its launches):", "",
                  "| Model | Implementation | # | op | node | device ms | % of device time |",
                  "|---|---|---:|---|---:|---:|---:|", *top]
    if derived["targets"]:
        lines += ["", "Targets (issue #5):", ""]
        for k, t in derived["targets"].items():
            detail = ", ".join(f"{a}={b:.4g}" if isinstance(b, float) else f"{a}={b}"
                               for a, b in t.items() if a != "met")
            lines.append(f"- {k}: {'met' if t['met'] else 'NOT met'} ({detail})")
    notes = []
    for m in models:
        for rid, label in row_ids(plan):
            r = rows.get(f"{m}|{rid}")
            if r and r.get("status") != "ok":
                notes.append(f"- {TITLES[m]}, {label}: {r.get('status')}: {str(r.get('error', ''))[:300]}")
            elif r and rid.startswith("litert-gpu-"):
                notes.append(f"- {TITLES[m]}, {label}: ran; {r.get('placement', '')}")
            elif r and rid.startswith("ours-") and r.get("profile_error"):
                notes.append(f"- {TITLES[m]}, {label}: no device profile: {r['profile_error'][:200]}")
    notes += [f"- bench.py error: {e.strip().splitlines()[-1][:300]}" for e in results.get("bench_errors", [])]
    if notes:
        lines += ["", "Failures and attempts:", "", *notes]
    lines += _e2e_lines(rows, plan, derived.get("e2e_targets", {}))
    return "\n".join(lines) + "\n"
