"""OpenCL delegates of one process share one context, the parsed kernel library and the built programs (issue 31:
sdlite generate's three delegates each built the same units again), on PoCL: a second delegate builds no program a
first one already built (read from the delegates' stats, with the persistent cache off so nothing else serves them),
and gets the same outputs as a process of its own; deleting the first delegate leaves the second working, and the
shared state goes with the last delegate; delegates created and run from several threads at once work.

Each scenario runs in a fresh process (shared_context_child.py): what a delegate takes from the process depends on
every delegate made there before, and the pytest process has made its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from sdlite import native
from tflite_gemm_models import OpGraphBuilder, add_mul_model, fully_connected_ref

CHILD = Path(__file__).with_name("shared_context_child.py")
# No persistent cache: a program a delegate did not build itself can only have come from another delegate. No tile
# tuning: the FULLY_CONNECTED builds only the tile the static cost model picks (PoCL compiles candidates slowly).
OPTIONS = ("cache_dir:none", "gemm_autotune:0")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two models with kernel units in common (the elementwise ADD / MUL the second also uses after its GEMM) and
    float64 references of their outputs."""
    rng = np.random.default_rng(31)
    root = tmp_path_factory.mktemp("shared-models")
    x = rng.standard_normal((1, 32, 64)).astype(np.float32)
    c = rng.standard_normal(64).astype(np.float32)
    d = rng.standard_normal((32, 64)).astype(np.float32)
    (root / "elementwise.tflite").write_bytes(add_mul_model(x.shape, c, d))
    np.savez(root / "elementwise.npz", x=x)
    refs = {"elementwise": (x.astype(np.float64) + c) * d}

    g = OpGraphBuilder()
    xg = rng.standard_normal((1, 16, 48)).astype(np.float32)
    w = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    e = rng.standard_normal((16, 64)).astype(np.float32)
    f = rng.standard_normal(64).astype(np.float32)
    xi = g.input("x", xg.shape)
    h = g.tensor("h", (1, 16, 64))
    s = g.tensor("s", (1, 16, 64))
    y = g.tensor("y", (1, 16, 64))
    opts = S.FullyConnectedOptionsT()
    opts.keepNumDims = True
    g.builtin(S.BuiltinOperator.FULLY_CONNECTED, S.BuiltinOptions.FullyConnectedOptions, opts,
              [xi, g.const("w", w), g.const("b", b)], [h])
    g.add(h, g.const("e", e), s)
    g.mul(s, g.const("f", f), y)
    g.output(y)
    (root / "gemm.tflite").write_bytes(g.build())
    np.savez(root / "gemm.npz", x=xg)
    refs["gemm"] = (fully_connected_ref(xg, w, b) + e) * f
    return {"root": root, "refs": refs, "xdg": tmp_path_factory.mktemp("xdg")}


def _run(models: dict[str, Any], scenario: str, names: list[str], tmp_path: Path) -> tuple[dict, dict]:
    out = tmp_path / f"{scenario}.npz"
    paths = ",".join(str(models["root"] / f"{n}.tflite") for n in names)
    # PoCL's own kernel cache in a folder of this module's (shared by its processes: only our stats are asserted)
    env = {**os.environ, "XDG_CACHE_HOME": str(models["xdg"]), "SDLITE_DELEGATE_PATH": str(native.delegate_path())}
    proc = subprocess.run([sys.executable, str(CHILD), scenario, str(out), paths, *OPTIONS], capture_output=True,
                          text=True, timeout=900, env=env, cwd=Path(__file__).parent)
    assert proc.returncode == 0, f"child failed:\n{proc.stderr[-3000:]}"
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    with np.load(out) as f:
        outputs = {k: f[k] for k in f.files}
    return stats, outputs


@pytest.fixture(scope="module")
def solo(models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, np.ndarray]]:
    """Each model alone in its own process: the programs it needs and its outputs."""
    out = {}
    for name in ("elementwise", "gemm"):
        stats, outputs = _run(models, "solo", [name], tmp_path_factory.mktemp(f"solo-{name}"))
        assert stats["0"]["programs_shared"] == 0 and stats["0"]["programs_built"] > 0, stats
        assert stats["0"]["claimed_nodes"] == (2 if name == "elementwise" else 3), stats
        np.testing.assert_allclose(outputs["0:y"], models["refs"][name], rtol=1e-4, atol=1e-4)
        out[name] = (stats["0"], outputs["0:y"])
    return out


def _same_as_solo(y: np.ndarray, solo_y: np.ndarray) -> None:
    np.testing.assert_allclose(y, solo_y, rtol=0, atol=1e-5)


def test_a_second_delegate_builds_no_program_the_first_built(models, solo, tmp_path):
    stats, outputs = _run(models, "sequential", ["elementwise", "gemm"], tmp_path)
    first, second = stats["0"], stats["1"]
    assert first["programs_built"] == solo["elementwise"][0]["programs_built"] and first["programs_shared"] == 0
    needed = solo["gemm"][0]["programs_built"]
    # the elementwise units come from the first delegate; only the GEMM's own are built
    assert second["programs_shared"] > 0, second
    assert second["programs_built"] + second["programs_shared"] == needed, (second, needed)
    assert second["programs_built"] < needed
    for s in (first, second):  # the cache is off: nothing was read from or written to it
        assert s["cache_dir"] == "" and s["cache_hits"]["program"] == 0 and s["cache_stores"]["program"] == 0
    _same_as_solo(outputs["0:y"], solo["elementwise"][1])
    _same_as_solo(outputs["1:y"], solo["gemm"][1])


def test_deleting_the_first_delegate_leaves_the_second_working(models, solo, tmp_path):
    """Delegate 1 was created while 0 lived, so it holds the shared state: 0's programs stay after 0 is deleted.
    Delegate 2 comes after both are gone: the state went with them, so it builds everything again."""
    stats, outputs = _run(models, "first_deleted", ["elementwise", "gemm"], tmp_path)
    needed = solo["gemm"][0]["programs_built"]
    assert stats["0"]["programs_shared"] == 0
    assert stats["1"]["programs_shared"] > 0
    assert stats["1"]["programs_built"] + stats["1"]["programs_shared"] == needed
    assert stats["2"]["programs_shared"] == 0, stats["2"]
    assert stats["2"]["programs_built"] == solo["elementwise"][0]["programs_built"]
    _same_as_solo(outputs["0:y"], solo["elementwise"][1])
    _same_as_solo(outputs["1:y"], solo["gemm"][1])
    _same_as_solo(outputs["2:y"], solo["elementwise"][1])


def test_delegates_created_and_run_from_threads_at_once(models, solo, tmp_path):
    """Four threads (each model twice) create their delegates and invoke together. Each program a delegate needed
    was built or taken exactly once, and the process compiled each unit once: a delegate that needs a unit another
    one is compiling waits for it instead of compiling it too (SharedPrograms::Claim), so the first wave built as many
    programs as the two models need together -- what the sequential scenario builds. A second wave of four, created
    while the first goes on invoking, finds every unit published and builds nothing."""
    names = ["elementwise", "gemm", "elementwise", "gemm"]
    stats, outputs = _run(models, "threads", names, tmp_path)
    seq, _ = _run(models, "sequential", ["elementwise", "gemm"], tmp_path)
    distinct = seq["0"]["programs_built"] + seq["1"]["programs_built"]
    assert sum(stats[str(i)]["programs_built"] for i in range(len(names))) == distinct, (stats, distinct)
    assert len(stats) == 2 * len(names)
    for i in range(2 * len(names)):
        name, s = names[i % len(names)], stats[str(i)]
        needed = solo[name][0]["programs_built"]
        assert s["programs_built"] + s["programs_shared"] == needed, (i, s)
        if i >= len(names):
            assert s["programs_built"] == 0 and s["programs_shared"] == needed, (i, s)
        assert s["invocations"] >= 4
        _same_as_solo(outputs[f"{i}:y"], solo[name][1])
