"""Text report in TFLite benchmark_model's shape: its lines in its order, then sdlite's extras.

benchmark_model's own lines keep its ``INFO: `` prefix (``INFO: Initialized session in 12.3ms.``, the run loops'
``count=`` lines, ``Inference timings in us``, the memory footprint); lines without the prefix are sdlite's
additions (backend, placement, model memory, the delegate's figures). The op profile follows as in
benchmark_model (``Operator-wise Profiling Info for Regular Benchmark Runs:`` and its sections), as text or
(``--profiling_output_csv_file``) CSV, with the "Summary by kernel" extra on the GPU backends.
"""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from sdlite.bench.op_profile import OpProfile, OpTiming

if TYPE_CHECKING:
    from sdlite.bench.run import BenchResult

RULE = "=" * 30
MB = float(1 << 20)  # benchmark_model's "MB" (2^20 bytes)
INFO = "INFO: "
PROFILE_HEADER = "Operator-wise Profiling Info for Regular Benchmark Runs:"
MEMORY_NOTE = ("Note: as the benchmark tool itself affects memory footprint, the following is only APPROXIMATE to "
               "the actual memory footprint of the model at runtime. Take the information at your discretion.")


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
    lines.append(f"Number of nodes executed: {len(prof.ops)}")
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
    launch it, ``[launches]``: how often per invocation, e.g. a Winograd conv run in bands of tiles launches its
    transforms once per band). It splits multi-launch nodes: a Winograd conv's transforms vs its batched GEMM,
    attention's passes."""
    ms: dict[str, float] = defaultdict(float)
    nodes: dict[str, int] = defaultdict(int)
    launches: dict[str, int] = defaultdict(int)
    for op in prof.ops:
        counts = dict(op.kernel_launches)
        for name, us in op.kernels:
            ms[name] += us
            nodes[name] += 1
            launches[name] += counts.get(name, 1)
    lines = [_section("Summary by kernel"),
             "\t{:>28}\t{:>9}\t{:>10}\t{:>9}\t{:>9}\t{:>9}".format("[kernel]", "[nodes]", "[launches]", "[avg ms]",
                                                                   "[avg %]", "[cdf %]")]
    cdf = 0.0
    for name, us in sorted(ms.items(), key=lambda kv: -kv[1]):
        pct = 100.0 * us / total_us if total_us > 0 else 0.0
        cdf += pct
        lines.append("\t{:>28}\t{:>9}\t{:>10}\t{:>9.3f}\t{:>8.3f}%\t{:>8.3f}%".format(
            name[:28], nodes[name], launches[name], us / 1e3, pct, cdf))
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


def profile_csv(prof: OpProfile, top: int = 10) -> str:
    """The op profile in benchmark_model's CSV form (``--profiling_output_csv_file``): its section rules, then
    ``node type, start, first, avg_ms, %, cdf%, mem KB, times called, name`` rows (``start`` is not measured here:
    0; ``mem KB`` is the node's output size), then the by-type summary."""
    total = prof.total_us

    def rows(ops: list[OpTiming]) -> list[str]:
        out, cdf = [], 0.0
        for op in ops:
            pct = 100.0 * op.avg_us / total if total > 0 else 0.0
            cdf += pct
            out.append(f"{op.op_name}, 0, {op.first_us / 1e3:g}, {op.avg_us / 1e3:g}, {pct:g}%, {cdf:g}%, "
                       f"{op.out_bytes / 1e3:g}, {op.times_called}, {op.name}")
        return out

    header = "node type, start, first, avg_ms, %, cdf%, mem KB, times called, name"
    lines = [PROFILE_HEADER, _section("Run Order"), header, *rows(prof.ops), ""]
    lines += [_section("Top by Computation Time"), header, *rows(sorted(prof.ops, key=lambda o: -o.avg_us)[:top]), ""]
    by_type: dict[str, list[OpTiming]] = defaultdict(list)
    for op in prof.ops:
        by_type[op.op_name].append(op)
    lines += [f"Number of nodes executed: {len(prof.ops)}", _section("Summary by node type"),
              "node type, count, avg_ms, avg %, cdf %, mem KB, times called"]
    cdf = 0.0
    for name, ops in sorted(by_type.items(), key=lambda kv: -sum(o.avg_us for o in kv[1])):
        t = sum(o.avg_us for o in ops)
        pct = 100.0 * t / total if total > 0 else 0.0
        cdf += pct
        lines.append(f"{name}, {len(ops)}, {t / 1e3:g}, {pct:g}%, {cdf:g}%, {sum(o.out_bytes for o in ops) / 1e3:g}, "
                     f"{sum(o.times_called for o in ops)}")
    return "\n".join(lines) + "\n"


def delegate_lines(r: "BenchResult") -> list[str]:
    """benchmark_model's lines on applying a delegate (only when ours was loaded)."""
    if r.delegate_kernels < 0:
        return []
    if r.fully_delegated:
        how = "will be completely executed by the delegate."
    elif r.delegate_kernels > 0:
        how = f"will be partially executed by the delegate w/ {r.delegate_kernels} delegate kernels."
    else:
        return [f"{INFO}Going to apply 1 delegates one after another.",
                f"{INFO}Though EXTERNAL delegate is explicitly applied, the model graph will not be executed by the "
                "delegate."]
    return [f"{INFO}Going to apply 1 delegates one after another.",
            f"{INFO}Explicitly applied EXTERNAL delegate, and the model graph {how}"]


def memory_lines(r: "BenchResult") -> list[str]:
    """benchmark_model's memory footprint lines (see :mod:`sdlite.bench.memory`)."""
    lines = [INFO + MEMORY_NOTE,
             f"{INFO}Memory footprint delta from the start of the tool (MB): init={r.mem_init_kb / 1024:g} "
             f"overall={r.mem_overall_kb / 1024:g}"]
    if r.peak_mem_mb > 0:
        lines.append(f"{INFO}Overall peak memory footprint (MB) via periodic monitoring: {r.peak_mem_mb:g}")
        if r.rss_end is not None:
            rss = r.rss_end
            lines += [f"{INFO}Memory status at the end of execution:",
                      f"{INFO}- VmRSS              : {rss.rss // (1 << 20)} MB",
                      f"{INFO}+ RssAnnon           : {rss.anon // (1 << 20)} MB",
                      f"{INFO}+ RssFile + RssShmem : {rss.shared // (1 << 20)} MB"]
    return lines


def model_report(r: "BenchResult", top: int = 10, profile_in_csv: bool = False) -> str:
    """One model's report: benchmark_model's lines in its order with sdlite's extras between them.

    ``profile_in_csv``: the op profile goes to a CSV file (:func:`profile_csv`), so only the rest is printed.
    """
    hist = ", ".join(f"{k} {v}" for k, v in list(r.op_histogram.items())[:8])
    more = "" if len(r.op_histogram) <= 8 else f", ... ({len(r.op_histogram)} types)"
    lines = [
        f"{INFO}Loaded model {r.path}",
        *delegate_lines(r),
        f"{INFO}The input model file size (MB): {r.model_bytes / 1e6:g}",
        f"{INFO}Initialized session in {r.init_us / 1e3:g}ms.",
        f"Backend: {r.backend} ({r.threads} thread{'s' if r.threads != 1 else ''})",
        f"Nodes: {r.num_ops} ({hist}{more})",
        f"Placement: {r.placement}",
    ]
    if "pre-invoke" in r.states:
        lines.append(INFO + r.states["pre-invoke"])
    phases = [r.warmup, r.stats] if r.warmup is not None else [r.stats]
    for loop, stats in zip(r.loops, phases):
        lines += [INFO + loop.announce(), INFO + stats.stream_text(), ""]
    lines.append(f"{INFO}Inference timings in us: Init: {r.init_us:.0f}, First inference: {r.first_run_us:.0f}, "
                 f"Warmup (avg): {r.warmup_avg_us:.0f}, Inference (avg): {r.stats.avg:.1f}")
    if (setup := device_setup_line(r)) is not None:
        lines.append(setup)
    if (cache := device_cache_line(r)) is not None:
        lines.append(cache)
    lines += memory_lines(r)
    lines.append(f"Memory (bytes): weights={r.weight_bytes} (sum of constant buffers) "
                 f"peak_activations_estimate={r.peak_activation_bytes} (liveness over graph order; "
                 "the runtime reports no arena size)")
    if r.device is not None:
        lines.append(device_memory_line(r))
    if "post-invoke" in r.states:
        lines.append(INFO + r.states["post-invoke"])
    if r.profile is not None and not profile_in_csv:
        lines += [INFO + PROFILE_HEADER, *profile_sections(r.profile, r.stats.avg, top)]
    lines.append(r.stats.line())
    if r.profile is not None and not profile_in_csv:
        lines.append(f"{len(r.profile.ops)} nodes observed")
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
