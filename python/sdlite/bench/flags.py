"""TFLite ``benchmark_model``'s command-line flags, as ``sdlite bench`` takes them.

One table (:data:`FLAGS`) holds each flag benchmark_model has and that means something here: its name, type,
benchmark_model's default and the label benchmark_model echoes it with (``INFO: Min num runs: [3]``). The CLI
registers them from the table, so spelling, defaults and the parameter echo cannot drift apart.

Syntax is benchmark_model's own (``tensorflow/lite/tools/command_line_flags.cc``): ``--name=value``, booleans
``true``/``false``/``1``/``0``. It is not absl's (no ``--noflag``), so no flag library is used; for the habits of
argparse users ``--name value`` and a bare boolean ``--name`` (= true) are accepted too.

A benchmark_model flag with no counterpart here (NNAPI, Hexagon, custom input files, ...) is an error that says
so; any other unknown flag is an error naming the closest known one.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sdlite.errors import SdliteError

TRUE_WORDS = ("true", "1")
FALSE_WORDS = ("false", "0")


def parse_bool(text: str) -> bool:
    """benchmark_model's boolean values: ``true``, ``false``, ``1``, ``0`` (argparse ``type=``)."""
    value = str(text).strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    raise ValueError(f"expected true, false, 1 or 0, got {text!r}")


parse_bool.__name__ = "bool"  # argparse names the type in its "invalid bool value" message


@dataclass(frozen=True)
class BenchFlag:
    """One benchmark_model flag. ``label`` is its parameter-echo text; ``aliases`` are older sdlite spellings."""

    name: str
    kind: type
    default: Any
    label: str
    help: str
    aliases: tuple[str, ...] = ()

    @property
    def options(self) -> tuple[str, ...]:
        return (f"--{self.name}", *(f"--{a}" for a in self.aliases))

    def echo(self, value: Any) -> str:
        """benchmark_model's ``Label: [value]`` (C++ stream formatting: bools as 1/0, floats like ``%g``)."""
        if self.kind is bool:
            text = "1" if value else "0"
        elif self.kind is float:
            text = f"{float(value):g}"
        else:
            text = str(value)
        return f"{self.label}: [{text}]"


# benchmark_model's order of LogParams(): BenchmarkModel's, then BenchmarkTfLiteModel's, then the delegate providers'.
FLAGS: tuple[BenchFlag, ...] = (
    BenchFlag("num_runs", int, 50, "Min num runs",
              "expected number of timed runs, see also --min_secs, --max_secs", ("num-runs",)),
    BenchFlag("min_secs", float, 1.0, "Min runs duration (seconds)",
              "minimum number of seconds to rerun for, potentially making the actual number of runs greater than "
              "--num_runs"),
    BenchFlag("max_secs", float, 150.0, "Max runs duration (seconds)",
              "maximum number of seconds to rerun for, potentially making the actual number of runs less than "
              "--num_runs; a run in progress is finished, no next one is started"),
    BenchFlag("run_delay", float, -1.0, "Inter-run delay (seconds)", "delay between runs in seconds (<= 0: none)"),
    BenchFlag("run_frequency", float, -1.0, "Number of prorated runs per second",
              "runs per second to aim at (overrides --run_delay; <= 0: back to back)"),
    BenchFlag("num_threads", int, -1, "Num threads",
              "CPU threads (-1, the default: every core this process may use)", ("num-threads",)),
    BenchFlag("warmup_runs", int, 1, "Min warmup runs",
              "minimum number of untimed runs (the first inference is the first of them), see also --warmup_min_secs",
              ("warmup-runs",)),
    BenchFlag("warmup_min_secs", float, 0.5, "Min warmup runs duration (seconds)",
              "minimum number of seconds of warm-up runs, potentially making them more than --warmup_runs"),
    BenchFlag("report_peak_memory_footprint", bool, False, "Report the peak memory footprint",
              "sample the resident set size in a background thread and report its peak"),
    BenchFlag("memory_footprint_check_interval_ms", int, 50, "Memory footprint check interval (ms)",
              "sampling interval of --report_peak_memory_footprint"),
    BenchFlag("graph", str, "", "Graph", "MODEL.tflite or FOLDER (same as the positional argument)"),
    BenchFlag("allow_fp16", bool, False, "Allow fp16",
              "let the stock LiteRT GPU accelerator (backend litert-gpu) compute in fp16", ("allow-fp16",)),
    BenchFlag("require_full_delegation", bool, False, "Require full delegation",
              "fail unless the delegate runs the whole graph as one partition"),
    BenchFlag("enable_op_profiling", bool, False, "Enable op profiling",
              "per-node timing (device events on opencl/gl, isolated nodes elsewhere; see the report's note)",
              ("enable-op-profiling",)),
    BenchFlag("max_profiling_buffer_entries", int, 1024, "Max profiling buffer entries",
              "accepted for benchmark_model scripts; no effect here (every node is kept)"),
    BenchFlag("profiling_output_csv_file", str, "", "CSV File to export profiling data to",
              "write the op profile as CSV to this file instead of printing it (needs --enable_op_profiling)"),
    BenchFlag("print_preinvoke_state", bool, False, "Print pre-invoke interpreter state",
              "print the interpreter's tensors and nodes before the first inference"),
    BenchFlag("print_postinvoke_state", bool, False, "Print post-invoke interpreter state",
              "print the interpreter's tensors and nodes after the timed runs"),
    BenchFlag("use_gpu", bool, False, "Use gpu",
              "the stock LiteRT GPU accelerator (= --backend litert-gpu; cannot run Sd* ops: for our delegate's "
              "GPU backends use --external_delegate_options=backend:opencl)"),
    BenchFlag("use_xnnpack", bool, True, "Use xnnpack",
              "false: TFLite's reference CPU kernels instead of XNNPACK (interpreter backends cpu/opencl/gl)"),
    BenchFlag("external_delegate_path", str, "", "External delegate path",
              "a libsdgpu_delegate build to load instead of the packaged one"),
    BenchFlag("external_delegate_options", str, "", "External delegate options",
              "key:value;key:value options for our delegate; 'backend:cpu|opencl|gl' picks the sdlite backend"),
    BenchFlag("verbose", bool, False, "Log parameter values verbosely",
              "echo every parameter, not only those given, and show native runtime logs"),
)
BY_NAME: dict[str, BenchFlag] = {f.name: f for f in FLAGS}
BOOL_OPTIONS: frozenset[str] = frozenset(o for f in FLAGS if f.kind is bool for o in f.options)

# benchmark_model flags that have no counterpart in sdlite bench, with the reason given when one is used.
UNSUPPORTED: dict[str, str] = {
    **{name: "sdlite bench feeds synthetic inputs of the model's fixed shapes (floats standard-normal, token ids "
             "a CLIP prompt)" for name in ("input_layer", "input_layer_shape", "input_layer_value_range",
                                            "input_layer_value_files")},
    **{name: "this delegate exists only in Android/iOS builds of benchmark_model; sdlite runs LiteRT's Python "
             "runtime with its own delegate" for name in ("use_nnapi", "use_hexagon", "use_coreml",
                                                          "nnapi_accelerator_name", "hexagon_lib_path")},
    "gpu_backend": "the stock GPU delegate's cl/gl choice is not exposed by LiteRT's CompiledModel; our delegate "
                   "picks with --external_delegate_options=backend:opencl or backend:gl",
    "gpu_precision_loss_allowed": "use --allow_fp16 (fp32 is sdlite's default so every backend compares with fp32 "
                                  "references)",
    "dry_run": "not implemented: sdlite bench always runs the model",
    "use_caching": "Ruy's prepacked-weight cache does not apply: CPU kernels are XNNPACK's or our delegate's",
}


def preprocess(argv: Sequence[str]) -> list[str]:
    """A bare boolean flag (``--enable_op_profiling``) becomes ``--enable_op_profiling=true``, so argparse takes the
    value from the same token and a following positional argument stays positional."""
    return [f"{a}=true" if a in BOOL_OPTIONS else a for a in argv]


def unknown_flag_error(token: str, known: Iterable[str]) -> SdliteError:
    """The one-line error for an argument argparse did not take: the closest known flag, or why it is unsupported."""
    flag = token.split("=", 1)[0]
    if not flag.startswith("-"):
        return SdliteError(f"unexpected argument {token!r}")
    name = flag.lstrip("-")
    if name in UNSUPPORTED:
        return SdliteError(f"benchmark_model's {flag} is not supported by sdlite bench: {UNSUPPORTED[name]}")
    known = sorted(set(known))
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
    if not close:  # a typo that flips '-' and '_' or drops a prefix still finds its flag
        close = difflib.get_close_matches(flag.replace("-", "_"), known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else " (see --help)"
    return SdliteError(f"unknown flag {flag}{hint}")


def echo_lines(given: dict[str, Any], verbose: bool) -> list[str]:
    """benchmark_model's parameter echo: the flags set on the command line (all of them with ``--verbose``), in
    its order; ``--graph`` is always echoed, ``verbose`` always first."""
    lines = [BY_NAME["verbose"].echo(verbose)]
    for flag in FLAGS:
        if flag.name == "verbose":
            continue
        if flag.name in given or verbose or flag.name == "graph":
            lines.append(flag.echo(given.get(flag.name, flag.default)))
    return lines
