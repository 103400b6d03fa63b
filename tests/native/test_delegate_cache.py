"""The persistent delegate cache through the delegate, on PoCL (OpenCL) and llvmpipe (GL): a second process is
served by the cache (read from the delegate's stats, not from timing), broken entries are reported once each,
rebuilt and give the same outputs, two processes filling one cache at once both succeed, the cache can be turned
off, an unwritable folder costs one warning. Every run is a fresh process (cache_child.py): the cache is about
what the next process finds. The entry format itself is tested in test_disk_cache.py.

OpenCL runs a model of elementwise ops with cache_programs=1: PoCL is a CPU device, whose program binaries the
delegate does not store by default (reading one makes PoCL generate every kernel's machine code, tens of seconds for
the GEMM kernels). GL runs a FULLY_CONNECTED whose tile choice llvmpipe tunes in well under a second, so its runs
cover both kinds of entries, programs and tiles.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from sdlite import native
from test_disk_cache import HEADER, hash64
from tflite_gemm_models import add_mul_model, fully_connected_model

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("cache_child.py")
BACKENDS = ("opencl", "gl")
OPTIONS = {"opencl": {"cache_programs": "1", "gemm_autotune": "0"}, "gl": {"tuning_budget_ms": "600000"}}
KINDS = {"opencl": ("program",), "gl": ("program", "tiles")}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    rng = np.random.default_rng(31)
    root = tmp_path_factory.mktemp("cache-models")
    out = {}
    x = rng.standard_normal((1, 64, 64)).astype(np.float32)
    (root / "opencl.tflite").write_bytes(add_mul_model(x.shape, rng.standard_normal(64).astype(np.float32),
                                                            rng.standard_normal((64, 64)).astype(np.float32)))
    np.savez(root / "opencl.npz", x=x)
    out["opencl"] = (root / "opencl.tflite", root / "opencl.npz")
    x = rng.standard_normal((1, 128, 256)).astype(np.float32)
    w = rng.standard_normal((192, 256)).astype(np.float32)
    (root / "gl.tflite").write_bytes(fully_connected_model(x.shape, w, rng.standard_normal(192).astype(np.float32)))
    np.savez(root / "gl.npz", x=x)
    out["gl"] = (root / "gl.tflite", root / "gl.npz")
    return out


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str], out: Path) -> None:
        assert proc.returncode == 0, f"child failed:\n{proc.stderr[-3000:]}"
        self.stats = json.loads(proc.stdout.strip().splitlines()[-1])
        self.stderr = proc.stderr
        with np.load(out) as f:
            self.outputs = {k: f[k] for k in f.files}

    def count(self, key: str, kind: str) -> int:
        return int(self.stats[key][kind])


def _cmd(models: dict, backend: str, out: Path, **options: str) -> list[str]:
    model, inputs = models[backend]
    opts = {**OPTIONS[backend], **options}
    return [sys.executable, str(CHILD), str(model), str(inputs), str(out), backend, *(f"{k}={v}" for k, v in opts.items())]


def _env(tmp_path: Path) -> dict[str, str]:
    # the default cache folder (and PoCL's own) under the test's folder: no test reads or fills the user's cache
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "SDLITE_DELEGATE_PATH": str(native.delegate_path())}


def _run(models: dict, backend: str, tmp_path: Path, name: str, **options: str) -> Run:
    out = tmp_path / f"{name}.npz"
    proc = subprocess.run(_cmd(models, backend, out, **options), capture_output=True, text=True, timeout=900,
                          env=_env(tmp_path), cwd=Path(__file__).parent)
    return Run(proc, out)


def _same_outputs(a: Run, b: Run) -> None:
    assert a.outputs.keys() == b.outputs.keys()
    for k in a.outputs:
        np.testing.assert_array_equal(a.outputs[k], b.outputs[k])


def _cache_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "cache:" in ln]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_process_is_served_by_the_cache(models: dict, tmp_path: Path, backend: str) -> None:
    cache = tmp_path / "cache"
    first = _run(models, backend, tmp_path, "first", cache_dir=str(cache))
    second = _run(models, backend, tmp_path, "second", cache_dir=str(cache))
    assert first.stats["cache_dir"] == str(cache) == second.stats["cache_dir"]
    for kind in KINDS[backend]:
        assert first.count("cache_hits", kind) == 0 and first.count("cache_misses", kind) > 0, kind
        assert first.count("cache_stores", kind) > 0, kind
        assert second.count("cache_misses", kind) == 0, (kind, second.stats)
        # every entry the second process needs; GL's first process also compiled tuning candidates that lost
        assert 0 < second.count("cache_hits", kind) <= first.count("cache_stores", kind), kind
        assert second.count("cache_stores", kind) == 0 and second.count("cache_rejected", kind) == 0
    if backend == "gl":  # the tile choice: timed by the first process, read by the second
        assert first.stats["tiles_tuned"] == 1 and first.stats["tiles_from_cache"] == 0
        assert second.stats["tiles_tuned"] == 0 and second.stats["tiles_from_cache"] == 1
        assert second.stats["setup_tuning_us"] == 0
    _same_outputs(first, second)
    assert _cache_lines(first.stderr + second.stderr) == []
    names = sorted(p.name for p in cache.iterdir())
    assert names and all(n.endswith(".sdc") and n.split("-")[0] in KINDS[backend] for n in names)


def test_a_shape_the_budget_left_untuned_keeps_its_plan_at_later_starts(models: dict, tmp_path: Path) -> None:
    """A shape the tuning budget leaves to the cost model is stored with that budget: a later start with the same
    budget reads it and tunes nothing (before, every start spent its whole budget on the next few shapes until all
    were tuned -- ~1 s per model at each warm start of the GL UNet -- and a tile choice could change between
    starts, and with it a pixel); a start with a larger budget tunes it, and that winner serves later starts."""
    cache = tmp_path / "cache"

    def run(name: str, budget: int) -> Run:
        return _run(models, "gl", tmp_path, name, cache_dir=str(cache), tuning_budget_ms=str(budget))

    first, second = run("first", 0), run("second", 0)
    assert (first.stats["tiles_untuned"], first.count("cache_stores", "tiles")) == (1, 1), first.stats
    assert (second.stats["tiles_untuned"], second.stats["tiles_tuned"]) == (1, 0), second.stats
    assert second.count("cache_hits", "tiles") == 1 and second.count("cache_stores", "tiles") == 0
    assert second.stats["setup_tuning_us"] == 0
    _same_outputs(first, second)
    tuned, after = run("tuned", 600000), run("after", 0)
    assert (tuned.stats["tiles_tuned"], tuned.count("cache_stores", "tiles")) == (1, 1), tuned.stats
    assert (after.stats["tiles_from_cache"], after.stats["tiles_tuned"], after.stats["tiles_untuned"]) == (1, 0, 0)
    _same_outputs(tuned, after)


def test_tuning_within_the_default_budget_compiles_no_candidate(models: dict, tmp_path: Path) -> None:
    """The default tuning budget (1 s) times only kernels the model already built: a candidate's compile costs more
    than the budget (PoCL: up to ~17 s for a 128-wide tile). Before, each start tuned a few more shapes and compiled
    their candidates, so even a warm cache missed a program per model and the first inference paid for compiles
    (H200: 2.5-13 s per model). A second process of a tuned FULLY_CONNECTED therefore needs no program the first
    did not store, and the first stores only the programs the model itself needs."""
    gl_model = {"opencl": models["gl"]}  # the FULLY_CONNECTED: a GEMM with tile candidates
    cache = tmp_path / "cache"
    opts = {"cache_dir": str(cache), "gemm_autotune": "1"}
    first = _run(gl_model, "opencl", tmp_path, "first", **opts)
    second = _run(gl_model, "opencl", tmp_path, "second", **opts)
    assert first.count("cache_stores", "program") > 0
    assert second.count("cache_misses", "program") == 0, second.stats
    assert second.count("cache_hits", "program") == first.count("cache_stores", "program"), (first.stats, second.stats)
    assert second.count("cache_stores", "program") == 0
    _same_outputs(first, second)


def _break(path: Path, how: str) -> str:
    """Breaks the entry `how`; returns the reason its rejection names."""
    raw = path.read_bytes()
    if how == "truncated":
        path.write_bytes(raw[:-7])
        return "truncated or extended"
    if how == "bit flip":
        path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 0x04]))
        return "payload checksum mismatch"
    assert how == "wrong version"
    h = bytearray(raw[:HEADER])
    h[8:12] = (2).to_bytes(4, "little")
    h[48:56] = hash64(bytes(h[:48])).to_bytes(8, "little")
    path.write_bytes(bytes(h) + raw[HEADER:])
    return "format version 2, expected 1"


@pytest.mark.parametrize("backend", BACKENDS)
def test_broken_entries_are_reported_once_rebuilt_and_change_nothing(models: dict, tmp_path: Path,
                                                                     backend: str) -> None:
    cache = tmp_path / "cache"
    good = _run(models, backend, tmp_path, "good", cache_dir=str(cache))
    entries = sorted(cache.iterdir())
    ways = ("truncated", "bit flip", "wrong version")
    broken = {p: _break(p, ways[i % len(ways)]) for i, p in enumerate(entries)}
    rebuilt = _run(models, backend, tmp_path, "rebuilt", cache_dir=str(cache))
    lines = _cache_lines(rebuilt.stderr)
    read = [p for p in broken if any(str(p) in ln for ln in lines)]  # GL: losing tuning candidates are not read
    assert len(lines) == len(read) > 0, rebuilt.stderr  # ONE line per broken entry read
    for path in read:
        [line] = [ln for ln in lines if str(path) in ln]
        assert line.startswith(f"sdgpu: WARNING: cache: ignoring {path}: ") and broken[path] in line
        assert line.endswith("; rebuilding it")
    for kind in KINDS[backend]:  # every entry the run read was broken; each was rebuilt and stored again
        assert rebuilt.count("cache_rejected", kind) == rebuilt.count("cache_misses", kind) > 0
        assert rebuilt.count("cache_hits", kind) == 0
        assert rebuilt.count("cache_stores", kind) == rebuilt.count("cache_rejected", kind)
    _same_outputs(good, rebuilt)
    again = _run(models, backend, tmp_path, "again", cache_dir=str(cache))
    for kind in KINDS[backend]:
        assert again.count("cache_rejected", kind) == 0 and again.count("cache_misses", kind) == 0
        assert again.count("cache_hits", kind) > 0
    _same_outputs(good, again)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_filling_one_cache_at_once_both_succeed(models: dict, tmp_path: Path, backend: str) -> None:
    cache = tmp_path / "cache"
    outs = [tmp_path / f"racer{i}.npz" for i in range(2)]
    procs = [subprocess.Popen(_cmd(models, backend, out, cache_dir=str(cache)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(tmp_path), cwd=Path(__file__).parent)
             for out in outs]
    runs = []
    for p, out in zip(procs, outs):
        stdout, stderr = p.communicate(timeout=900)
        runs.append(Run(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr), out))
    _same_outputs(runs[0], runs[1])
    for r in runs:
        assert _cache_lines(r.stderr) == [] and all(v == 0 for v in r.stats["cache_rejected"].values())
    assert not [p for p in cache.iterdir() if not p.name.endswith(".sdc")]  # no temporary file left
    after = _run(models, backend, tmp_path, "after", cache_dir=str(cache))
    for kind in KINDS[backend]:
        assert after.count("cache_misses", kind) == 0 and after.count("cache_rejected", kind) == 0
        assert after.count("cache_hits", kind) > 0
    _same_outputs(runs[0], after)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_off_reads_and_writes_nothing(models: dict, tmp_path: Path, backend: str) -> None:
    off = _run(models, backend, tmp_path, "off", cache_dir="none")
    assert off.stats["cache_dir"] == ""
    assert all(v == 0 for key in ("cache_hits", "cache_misses", "cache_stores") for v in off.stats[key].values())
    assert not (tmp_path / "xdg" / "sdgpu").exists()  # the default folder is untouched too
    default = _run(models, backend, tmp_path, "default")  # no cache_dir: the per-user default folder
    assert default.stats["cache_dir"] == str(tmp_path / "xdg" / "sdgpu")
    assert sum(default.stats["cache_stores"].values()) > 0
    _same_outputs(off, default)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unwritable_cache_folder_warns_once_and_runs(models: dict, tmp_path: Path, backend: str) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder's parent should be")  # unwritable even for root
    folder = blocker / "cache"
    run = _run(models, backend, tmp_path, "unwritable", cache_dir=str(folder))
    lines = _cache_lines(run.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"sdgpu: WARNING: cache: cannot write to {folder} ("), run.stderr
    assert run.stats["cache_store_failures"] >= 1 and sum(run.stats["cache_stores"].values()) == 0
    reference = _run(models, backend, tmp_path, "reference", cache_dir="none")
    _same_outputs(run, reference)


def test_opencl_alias_option_still_names_the_cache(models: dict, tmp_path: Path) -> None:
    """opencl_cache_dir, the old option: still accepted (one deprecation warning), it names the shared cache."""
    run = _run(models, "opencl", tmp_path, "alias", opencl_cache_dir=str(tmp_path / "old"))
    assert run.stats["cache_dir"] == str(tmp_path / "old")
    assert "option opencl_cache_dir is deprecated" in run.stderr
    with pytest.raises(native.NativeDelegateError, match="differ; set cache_dir only"):
        native.DelegateOptions(backend="opencl", cache_dir="/a", opencl_cache_dir="/b")


def test_readme_tiny_example_first_result_on_a_cold_cache(tiny_export: Path, tmp_path: Path) -> None:
    """Acceptance 4 of issue 31: the README's tiny export (``sdconvert --random-weights tiny --verify``, the
    ``tiny_export`` fixture) gets its first ``sdlite bench --backend opencl`` result in under 60 s from a cold cache:
    ours and PoCL's own kernel cache both empty (XDG_CACHE_HOME is a fresh folder). The bound is on the CPU time the
    command used (PoCL compiles on one core; on this 2-core CI machine, idle, wall time is about the same) so that a
    machine shared with other jobs does not fail it; the wall time must stay under 3 minutes. Before the kernel
    library was split (issue 31) the same command took ~4 CPU minutes: the whole library compiled, then every kernel
    again to read the program's binary."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sdlite", "bench", str(tiny_export / "unet.tflite"), "--backend",
                           "opencl", "--num_runs", "1", "--warmup_runs", "0", "--json"],
                          capture_output=True, text=True, timeout=600, env=_env(tmp_path))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)["results"][0]
    dev = result["device"]
    assert dev["cache_dir"] == str(tmp_path / "xdg" / "sdgpu")
    assert dev["cache_hits"] == {"program": 0, "tiles": 0}  # cold: nothing served
    assert result["first_run_us"] > 0
    assert cpu < 60, f"cold first result took {cpu:.1f} CPU s ({wall:.1f} s wall)"
    assert wall < 180, f"cold first result took {wall:.1f} s wall ({cpu:.1f} CPU s)"
