"""Run mutants of the model corpus (model_corpus.py) through the command lines, in a process of its own.

For each mutant index: write the file, run ``sdconvert inspect FILE`` and ``sdlite bench FILE --backend B
--num_runs 1 --warmup_runs 0`` for each backend asked for, and print one JSON line per run (flushed) with the exit
code, the stderr lines and whether a Python exception escaped or an ignored one was printed. A ``start`` line goes
out before each mutant, so when a run kills this process (a signal, a hang caught by the watchdog) the parent
test knows which mutant did it and starts a new worker after it.

The command lines run in this process (their ``main(argv)``, with file descriptors 1 and 2 redirected to files),
not as one process per run: a Python start with LiteRT costs seconds here, the runs themselves tens of milliseconds.
An escaping exception is what the console entry point would print as a traceback, so it counts as one.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from model_corpus import Corpus

TRACEBACK = "Traceback (most recent call last)"


def run_cli(main, argv: list[str]) -> dict:  # noqa: ANN001 - a CLI's main(argv) -> int
    """``main(argv)`` with fd 1 / fd 2 captured; never raises."""
    ignored: list[str] = []
    t0 = time.perf_counter()
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: ignored.append(f"{u.exc_type.__name__}: {u.exc_value} in {u.object!r}")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        escaped = ""
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException as e:  # noqa: BLE001 - the point: what would have been a traceback
            rc = 1
            escaped = "".join(traceback.format_exception_only(type(e), e)).strip()
        finally:
            import gc

            gc.collect()  # a half-built object's __del__ runs now, inside the capture
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sys.unraisablehook = previous_hook
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    return {
        "rc": rc, "stderr": lines[:20], "stdout_bytes": len(stdout), "escaped": escaped, "ignored": ignored,
        "traceback": bool(escaped) or bool(ignored) or TRACEBACK in stderr or TRACEBACK in stdout,
        "json_ok": _json_ok(stdout) if "--json" in argv else None, "seconds": round(time.perf_counter() - t0, 3),
    }


def _json_ok(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bases", type=Path, required=True, help="folder with <name>.tflite base models")
    ap.add_argument("--names", default="unet,text_encoder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--indices", default="", help="comma list of mutant indices to run (default: all)")
    ap.add_argument("--gpu-backends", default="opencl,gl")
    ap.add_argument("--scratch", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=120.0, help="per mutant; the process exits when exceeded")
    args = ap.parse_args()

    from sdconvert.cli import main as sdconvert_main
    from sdlite.cli import main as sdlite_main

    bases = {n: (args.bases / f"{n}.tflite").read_bytes() for n in args.names.split(",")}
    corpus = Corpus(bases, args.seed)
    gpu = corpus.gpu_share(args.count)
    indices = [int(i) for i in args.indices.split(",") if i] if args.indices else range(args.count)
    args.scratch.mkdir(parents=True, exist_ok=True)
    emit = sys.__stdout__
    for i in indices:
        m = corpus[i]
        print(json.dumps({"start": i, "name": m.name}), file=emit, flush=True)
        faulthandler.dump_traceback_later(args.timeout, exit=True)
        path = args.scratch / f"{m.name}.tflite"
        path.write_bytes(m.data)
        runs = {"inspect": run_cli(sdconvert_main, ["inspect", str(path), "--json"])}
        backends = ["cpu", *(args.gpu_backends.split(",") if i in gpu and args.gpu_backends else [])]
        for b in backends:
            argv = ["bench", str(path), "--backend", b, "--num_runs", "1", "--warmup_runs", "0"]
            if b != "cpu":
                argv += ["--delegate_options", "gemm_autotune:0"]  # no tile timing: the same code paths, faster
            runs[b] = run_cli(sdlite_main, argv)
        faulthandler.cancel_dump_traceback_later()
        path.unlink()
        print(json.dumps({"done": i, "name": m.name, "kind": m.kind, "detail": m.detail, "runs": runs}), file=emit,
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
