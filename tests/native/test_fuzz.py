"""Fuzzing: mutated options blobs and single-op models straight into the delegate, and a corpus of mutated real
models (model_corpus.py) through ``sdconvert inspect`` and ``sdlite bench`` on every backend. Nothing may crash, hang
or print a traceback, and every backend must accept and refuse the same models.

The loops run in subprocesses (fuzz_worker.py, corpus_worker.py): a segfault or abort shows up as a negative
return code here instead of killing pytest.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("fuzz_worker.py")


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzzed_options_and_models_never_crash(seed):
    proc = subprocess.run(
        [sys.executable, str(WORKER), "--seed", str(seed), "--blobs", "3000", "--models", "240"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"fuzz worker died with {proc.returncode}:\n{proc.stderr[-3000:]}"
    tally = json.loads(proc.stdout.strip().splitlines()[-1])
    assert tally["blobs"] == 3000
    assert tally["models"] == 240
    # Every model ends in exactly one of the two expected outcomes ...
    assert tally["declined"] + tally["claimed_ran"] == 240, tally
    # ... and the mutations are neither all rejected nor all harmless.
    assert tally["declined"] >= 50 and tally["claimed_ran"] >= 20, tally
    assert 0 < tally["blobs_accepted"] < tally["blobs"]


# ---- the model corpus through the command lines -----------------------------------------------------------------

CORPUS_WORKER = Path(__file__).with_name("corpus_worker.py")
CORPUS_SIZE = 320
CORPUS_SEED = 34
BACKENDS = ("cpu", "opencl", "gl")


def _run_corpus(bases: Path, scratch: Path, indices: list[int]) -> tuple[dict[int, dict], dict[int, str]]:
    """Run ``indices`` through corpus_worker.py; a worker that dies is restarted after the mutant it was on.

    Returns ``({index: result line}, {index: how the worker died on it})``."""
    done: dict[int, dict] = {}
    died: dict[int, str] = {}
    todo = list(indices)
    while todo:
        proc = subprocess.run(
            [sys.executable, str(CORPUS_WORKER), "--bases", str(bases), "--count", str(CORPUS_SIZE),
             "--seed", str(CORPUS_SEED), "--indices", ",".join(map(str, todo)), "--scratch", str(scratch)],
            capture_output=True, text=True, timeout=1800,
        )
        started = None
        for line in proc.stdout.splitlines():
            row = json.loads(line)
            if "start" in row:
                started = row["start"]
            else:
                done[row["done"]] = row
                started = None
        if started is None and proc.returncode != 0:
            raise AssertionError(f"corpus worker failed outside a mutant (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
        if started is not None:  # killed by a signal, or the watchdog caught a hang
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode} (hang?)"
            died[started] = f"{how}: {proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else ''}"
        todo = [i for i in todo if i not in done and i not in died]
    return done, died


def test_model_corpus_never_crashes_and_backends_agree(tiny_fused_winograd_models, tmp_path, capsys):
    """Issue 34's corpus: >= 300 seeded mutants of the tiny fused + Winograd UNet and text encoder through
    ``sdconvert inspect --json`` and ``sdlite bench`` on cpu (every mutant) and on opencl and gl (a seeded quarter):
    no signal, no hang, no traceback; every failure is one line; inspect --json is valid JSON; and cpu, opencl and gl
    accept and refuse the same mutants (inspect too: it runs the same validator)."""
    from concurrent.futures import ThreadPoolExecutor

    indices = list(range(CORPUS_SIZE))
    with ThreadPoolExecutor(2) as pool:  # two workers: the machine's two cores
        parts = list(pool.map(lambda k: _run_corpus(tiny_fused_winograd_models, tmp_path / f"w{k}", indices[k::2]),
                              range(2)))
    done = {i: r for d, _ in parts for i, r in d.items()}
    died = {i: h for _, d in parts for i, h in d.items()}

    per_backend = {b: {"runs": 0, "accepted": 0, "tracebacks": 0, "multi_line": 0} for b in ("inspect", *BACKENDS)}
    problems: list[str] = []
    disagreements: dict[str, int] = {b: 0 for b in BACKENDS}
    kinds: dict[str, int] = {}
    for i, row in sorted(done.items()):
        runs = row["runs"]
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
        for b, r in runs.items():
            c = per_backend[b]
            c["runs"] += 1
            c["accepted"] += r["rc"] == 0
            errors = [line for line in r["stderr"] if ": warning: " not in line]
            if r["traceback"]:
                c["tracebacks"] += 1
                problems.append(f"{row['name']} ({row['detail']}) {b}: traceback {r['escaped'] or r['ignored']}")
            if r["rc"] != 0 and len(errors) != 1:
                c["multi_line"] += 1
                problems.append(f"{row['name']} ({row['detail']}) {b}: rc {r['rc']} with stderr {errors}")
            if b == "inspect" and r["json_ok"] is False and r["rc"] != 2:
                problems.append(f"{row['name']} inspect --json printed invalid JSON")
        verdict = {b: runs[b]["rc"] == 0 for b in BACKENDS if b in runs}
        for b in BACKENDS:
            if b in verdict and verdict[b] != (runs["inspect"]["rc"] == 0):
                disagreements[b] += 1
                problems.append(f"{row['name']} ({row['detail']}): inspect rc {runs['inspect']['rc']} but {b} rc "
                                f"{runs[b]['rc']}: {runs[b]['stderr'][:1]}")
    gpu_runs = per_backend["opencl"]["runs"]
    summary = (f"\nmodel corpus: {len(done) + len(died)} mutants ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}); "
               f"crashes/hangs {len(died)}\n" + "\n".join(
                   f"  {b:<8} runs {c['runs']:>4}  accepted {c['accepted']:>4}  tracebacks {c['tracebacks']}  "
                   f"multi-line errors {c['multi_line']}" + (f"  disagreements with inspect {disagreements[b]}"
                                                            if b in disagreements else "")
                   for b, c in per_backend.items()))
    with capsys.disabled():
        print(summary)
    assert not died, died
    assert not problems, "\n".join(problems[:40])
    assert len(done) >= 300 and gpu_runs >= 75 and per_backend["gl"]["runs"] == gpu_runs
    # the corpus reaches both verdicts on every backend
    for b in ("inspect", *BACKENDS):
        assert 0 < per_backend[b]["accepted"] < per_backend[b]["runs"], (b, per_backend[b])
