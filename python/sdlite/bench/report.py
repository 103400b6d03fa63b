"""Text report in TFLite benchmark_model's shape (sections, columns, the ``Timings (microseconds)`` line)."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from sdlite.bench.op_profile import OpProfile, OpTiming

if TYPE_CHECKING:
    from sdlite.bench.run import BenchResult

RULE = "=" * 30
MB = float(1 << 20)  # benchmark_model's "MB" (2^20 bytes)


def _section(title: str) -> str:
    return f"{RULE} {title} {RULE}"


def _op_rows(ops: list[OpTiming], total_us: float) -> list[str]:
    header = ("\t{:>24}\t{:>12}\t{:>9}\t{:>9}\t{:>8}\t{:>8}\t{:>9}\t{:>14}\t{}"
              .format("[node type]", "[executor]", "[first]", "[avg ms]", "[%]", "[cdf%]", "[out KB]",
                      "[times called]", "[Name]"))
    rows = [header]
    cdf = 0.0
    for op in ops:
        pct = 100.0 * op.avg_us / total_us if total_us > 0 else 0.0
        cdf += pct
        rows.append("\t{:>24}\t{:>12}\t{:>9.3f}\t{:>9.3f}\t{:>7.3f}%\t{:>7.3f}%\t{:>9.3f}\t{:>14}\t[{}]".format(
            op.op_name[:24], op.executor[:12], op.first_us / 1e3, op.avg_us / 1e3, pct, cdf,
            op.out_bytes / 1024, op.times_called, op.name))
    return rows


def profile_sections(prof: OpProfile, whole_model_avg_us: float, top: int = 10) -> list[str]:
    """The "Run Order", "Top by Computation Time" and "Summary by node type" sections."""
    total = prof.total_us
    if prof.kind == "device":
        share = 100.0 * total / whole_model_avg_us if whole_model_avg_us > 0 else 0.0
        note = (f"Note: {prof.method}. Device: {prof.device or '?'}; {prof.runs_averaged} timed runs averaged. "
                f"Sum of node times {total / 1e3:.3f} ms = {share:.1f}% of the whole-model avg "
                f"{whole_model_avg_us / 1e3:.3f} ms (the rest: host launch/queue overhead, input upload, "
                "output download).")
    else:
        note = (f"Note: {prof.method}. Sum of node times {total / 1e3:.3f} ms vs whole-model avg "
                f"{whole_model_avg_us / 1e3:.3f} ms; invoke overhead {prof.overhead_us:.2f} us subtracted; "
                f"{prof.distinct} distinct nodes timed.")
    lines = [note]
    if prof.skipped:
        lines.append(f"Not timed ({len(prof.skipped)} nodes): " + "; ".join(
            f"#{i}: {why}" for i, why in list(prof.skipped.items())[:5]))
    lines += [_section("Run Order"), *_op_rows(prof.ops, total), ""]
    ranked = sorted(prof.ops, key=lambda o: -o.avg_us)[:top]
    lines += [_section("Top by Computation Time"), *_op_rows(ranked, total), ""]
    by_type: dict[str, list[OpTiming]] = defaultdict(list)
    for op in prof.ops:
        by_type[op.op_name].append(op)
    summary = sorted(by_type.items(), key=lambda kv: -sum(o.avg_us for o in kv[1]))
    lines.append(_section("Summary by node type"))
    lines.append("\t{:>24}\t{:>9}\t{:>9}\t{:>9}\t{:>9}\t{:>9}\t{:>14}".format(
        "[Node type]", "[count]", "[avg ms]", "[avg %]", "[cdf %]", "[out KB]", "[times called]"))
    cdf = 0.0
    for name, ops in summary:
        t = sum(o.avg_us for o in ops)
        pct = 100.0 * t / total if total > 0 else 0.0
        cdf += pct
        lines.append("\t{:>24}\t{:>9}\t{:>9.3f}\t{:>8.3f}%\t{:>8.3f}%\t{:>9.3f}\t{:>14}".format(
            name[:24], len(ops), t / 1e3, pct, cdf, sum(o.out_bytes for o in ops) / 1024,
            sum(o.times_called for o in ops)))
    lines.append("")
    if prof.kind == "device" and any(op.kernels for op in prof.ops):
        lines += kernel_summary(prof, total)
    return lines


def kernel_summary(prof: OpProfile, total_us: float) -> list[str]:
    """The "Summary by kernel" section: device time per kernel name over all nodes (``[nodes]``: how many nodes
    launch it). It splits multi-launch nodes: a Winograd conv's transforms vs its batched GEMM, attention's passes."""
    ms: dict[str, float] = defaultdict(float)
    nodes: dict[str, int] = defaultdict(int)
    for op in prof.ops:
        for name, us in op.kernels:
            ms[name] += us
            nodes[name] += 1
    lines = [_section("Summary by kernel"),
             "\t{:>28}\t{:>9}\t{:>9}\t{:>9}\t{:>9}".format("[kernel]", "[nodes]", "[avg ms]", "[avg %]", "[cdf %]")]
    cdf = 0.0
    for name, us in sorted(ms.items(), key=lambda kv: -kv[1]):
        pct = 100.0 * us / total_us if total_us > 0 else 0.0
        cdf += pct
        lines.append("\t{:>28}\t{:>9}\t{:>9.3f}\t{:>8.3f}%\t{:>8.3f}%".format(name[:28], nodes[name], us / 1e3, pct, cdf))
    lines.append("")
    return lines


def device_memory_line(r: "BenchResult") -> str:
    """``Delegate: 1 partition, 0 CPU nodes; arena 12.3 MB; GPU weights 860.1 MB (source)``."""
    d = r.device
    assert d is not None
    parts = "?" if d.partitions < 0 else str(d.partitions)
    return (f"Delegate: {parts} partition{'s' if d.partitions != 1 else ''}, {d.cpu_nodes} CPU node"
            f"{'s' if d.cpu_nodes != 1 else ''}; intermediate arena {d.arena_bytes / MB:.2f} MB "
            f"(delegate stats max_arena_bytes); GPU weights {d.weight_bytes / MB:.2f} MB ({d.weight_source})"
            + (f"; host dispatch {d.dispatch_us / 1e3:.2f} ms (last invoke)" if d.dispatch_us >= 0 else ""))


def device_setup_line(r: "BenchResult") -> str | None:
    """``Delegate set-up (host ms, ...): programs 0.4, weights packed / transformed 1.2, uploaded 3.4, GEMM tile
    tuning 5.6 (...)``, or None when the delegate does not report its set-up time (CPU backend)."""
    d = r.device
    if d is None or d.setup_weights_host_us < 0:
        return None
    programs = f"programs built {d.setup_programs_us / 1e3:.1f}, " if d.setup_programs_us >= 0 else ""
    where = (f"; {d.weights_on_device} weights made on the device, {d.weights_on_host} on the host"
             if d.weights_on_device >= 0 else "")
    return (f"Delegate set-up (host ms, mostly during the first inference): {programs}weights packed / transformed "
            f"{d.setup_weights_host_us / 1e3:.1f}, uploaded {d.setup_weights_upload_us / 1e3:.1f}, GEMM tile tuning "
            f"{d.setup_tuning_us / 1e3:.1f} (delegate stats setup_*_us){where}")


def device_cache_line(r: "BenchResult") -> str | None:
    """``Delegate cache (/home/u/.cache/sdgpu): programs 15 hits / 0 misses, tile choices 40 hits / 0 misses; ...``
    -- whether this start was served by the persistent cache -- or None without one."""
    d = r.device
    if d is None or not d.cache_hits:
        return None
    if not d.cache_dir:
        return "Delegate cache: off (cache_dir none)"
    kinds = {"program": "programs", "tiles": "tile choices"}
    parts = [f"{kinds.get(k, k)} {d.cache_hits.get(k, 0)} hits / {d.cache_misses.get(k, 0)} misses"
             + (f" ({d.cache_rejected[k]} rejected)" if d.cache_rejected.get(k) else "") for k in d.cache_hits]
    tiles = (f"; GEMM shapes: {d.tiles_tuned} tuned now, {d.tiles_from_cache} from the cache, {d.tiles_untuned} on "
             "the cost model" if d.tiles_tuned >= 0 else "")
    hit = sum(d.cache_hits.values()) > 0 and sum(d.cache_misses.values()) == 0
    verdict = "hit" if hit else "partly hit" if sum(d.cache_hits.values()) > 0 else "miss"
    return f"Delegate cache ({d.cache_dir}): {verdict}: " + ", ".join(parts) + tiles


def model_report(r: "BenchResult", top: int = 10) -> str:
    hist = ", ".join(f"{k} {v}" for k, v in list(r.op_histogram.items())[:8])
    more = "" if len(r.op_histogram) <= 8 else f", ... ({len(r.op_histogram)} types)"
    lines = [
        f"Model: {r.path}",
        f"Backend: {r.backend} ({r.threads} thread{'s' if r.threads != 1 else ''})",
        f"Nodes: {r.num_ops} ({hist}{more})",
        f"Placement: {r.placement}",
        f"Memory (bytes): weights={r.weight_bytes} (sum of constant buffers) "
        f"peak_activations_estimate={r.peak_activation_bytes} (liveness over graph order; "
        "the runtime reports no arena size)",
        *([device_memory_line(r)] if r.device is not None else []),
        f"Inference timings in us: Init: {r.load_s * 1e6:.0f}, First inference: {r.first_run_us:.0f}, "
        f"Warmup (avg): {r.warmup_avg_us:.0f}, Inference (avg): {r.stats.avg:.1f}",
    ]
    if (setup := device_setup_line(r)) is not None:
        lines.append(setup)
    if (cache := device_cache_line(r)) is not None:
        lines.append(cache)
    if r.profile is not None:
        lines += ["", *profile_sections(r.profile, r.stats.avg, top)]
    lines.append(r.stats.line())
    return "\n".join(lines)


def comparison_table(results: list["BenchResult"]) -> str:
    """Side-by-side table; ``[ratio]`` = avg / avg of the first row (baseline), ``[speedup]`` its inverse."""
    base = results[0].stats.avg
    width = max(len(r.label) for r in results) + 2
    lines = [_section("Comparison (baseline: first row)"),
             "\t{:<{w}}\t{:>10}\t{:>7}\t{:>10}\t{:>10}\t{:>10}\t{:>10}\t{:>8}\t{:>9}".format(
                 "[model]", "[backend]", "[count]", "[avg ms]", "[min ms]", "[max ms]", "[std ms]", "[ratio]",
                 "[speedup]", w=width)]
    for r in results:
        s = r.stats
        ratio = s.avg / base if base > 0 else float("nan")
        row = "\t{:<{w}}\t{:>10}\t{:>7}\t{:>10.3f}\t{:>10.3f}\t{:>10.3f}\t{:>10.3f}\t{:>7.3f}x\t{:>8.3f}x"
        lines.append(row.format(
            r.label, r.backend, s.count, s.avg / 1e3, s.min / 1e3, s.max / 1e3, s.std / 1e3, ratio,
            1.0 / ratio if ratio > 0 else float("nan"), w=width))
    return "\n".join(lines)
