"""The delegate as a TFLite external-delegate plugin: loading, options, partitioning, coexistence with XNNPACK."""
from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, load_delegate

from harness import assert_close, make_interpreter, run
from sdconvert.ops import gelu as G
from sdconvert.ops import group_norm as GN
from sdlite import native
from tflite_models import GraphBuilder, flex, gelu_model


def _gelu(mode: str) -> bytes:
    return G.SPEC.encode(G.GeluAttrs(approximate=mode))


def test_library_is_found_and_reports_version(delegate_lib):
    assert delegate_lib.name == native.LIBRARY_NAME
    assert delegate_lib.is_file()
    assert "cpu" in native.version()


def test_env_override_pointing_nowhere_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv(native.ENV_DELEGATE_PATH, str(tmp_path / "missing.so"))
    with pytest.raises(native.NativeDelegateError) as err:
        native.delegate_path()
    assert "\n" not in str(err.value)
    assert native.ENV_DELEGATE_PATH in str(err.value)


def test_env_override_accepts_a_build_directory(monkeypatch, delegate_lib):
    monkeypatch.setenv(native.ENV_DELEGATE_PATH, str(delegate_lib.parent))
    assert native.delegate_path() == delegate_lib.resolve()


@pytest.mark.parametrize(
    "opts, message",
    [
        ({"bogus": 1}, "unknown delegate option(s): bogus"),
        ({"backend": "vulkan"}, "unknown backend 'vulkan'"),
        ({"log_level": "loud"}, "unknown log_level 'loud'"),
        ({"num_threads": 0}, "num_threads must be an int in 1..256, got 0"),
        ({"attention_block_q": 5000}, "attention_block_q must be an int in 1..1024, got 5000"),
    ],
)
def test_bad_delegate_options_are_one_line_errors(opts, message):
    with pytest.raises(native.NativeDelegateError) as err:
        native.load(**opts)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_native_side_rejects_unknown_keys(delegate_lib):
    with pytest.raises(ValueError, match="unknown option 'bogus'"):
        load_delegate(str(delegate_lib), {"bogus": "1"})
    with pytest.raises(ValueError, match="num_threads='x' must be 1..256 or 'auto'"):
        load_delegate(str(delegate_lib), {"num_threads": "x"})


def test_model_with_sd_op_fails_clearly_without_the_delegate():
    interpreter = Interpreter(model_content=gelu_model([2, 8], _gelu("tanh")))
    with pytest.raises(RuntimeError, match="unresolved custom op: SdGelu"):
        interpreter.allocate_tensors()


def test_claims_the_custom_node_and_runs_it(rng):
    x = rng.standard_normal((2, 8), dtype=np.float32)
    result = run(gelu_model([2, 8], _gelu("tanh")), {"x": x}, num_threads=1)
    assert_close(result.outputs["y"], G.reference([x], G.GeluAttrs("tanh")))
    s = result.stats
    assert (s["claimed_nodes"], s["declined_nodes"], s["other_nodes"]) == (1, 0, 0)
    assert s["claimed_by_op"] == {"SdGelu": 1}
    assert s["invocations"] == 1 and s["prepares"] == 1


def _add_gelu_mul_model() -> bytes:
    g = GraphBuilder()
    x = g.input("x", [2, 8])
    c = g.const("c", np.full([2, 8], 1.5, np.float32))
    a, b, y = g.tensor("a", [2, 8]), g.tensor("b", [2, 8]), g.tensor("y", [2, 8])
    g.add(x, c, a)
    g.custom("SdGelu", [a], [b], _gelu("quick"))
    g.mul(b, c, y)
    g.output(y)
    return g.build()


@pytest.mark.parametrize("default_delegates, expected_delegate_nodes", [(True, 3), (False, 1)])
def test_builtin_ops_stay_with_the_runtime_and_xnnpack(rng, default_delegates, expected_delegate_nodes):
    delegate = native.load(num_threads=1)
    interpreter = make_interpreter(_add_gelu_mul_model(), delegate, default_delegates=default_delegates)
    x = rng.standard_normal((2, 8), dtype=np.float32)
    y = interpreter.get_signature_runner("serving_default")(x=x)["y"]
    expected = G.reference([x + 1.5], G.GeluAttrs("quick")) * 1.5
    assert_close(y, expected)
    stats = native.stats(delegate)
    assert (stats["claimed_nodes"], stats["other_nodes"]) == (1, 2)
    ops = interpreter._get_ops_details()  # noqa: SLF001 - only way to see the delegated nodes
    delegate_nodes = [op for op in ops if op["op_name"] == "DELEGATE"]
    # Ours replaces SdGelu (tensor 2 -> 3); with default delegates XNNPACK takes ADD and MUL as two more.
    assert len(delegate_nodes) == expected_delegate_nodes
    assert [list(op["inputs"]) for op in delegate_nodes][0] == [2]
    if default_delegates:
        assert sorted(tuple(op["outputs"]) for op in delegate_nodes[1:]) == [(2,), (4,)]


def _chain_model(shape, gn_attrs, gelu_count: int, gamma, beta) -> bytes:
    """x -> SdGroupNorm -> SdGelu x gelu_count -> y: one partition with internal tensors."""
    g = GraphBuilder()
    x = g.input("x", shape)
    gm, bt = g.const("gamma", gamma), g.const("beta", beta)
    cur = g.tensor("gn", shape)
    g.custom("SdGroupNorm", [x, gm, bt], [cur], GN.SPEC.encode(gn_attrs))
    for i in range(gelu_count):
        nxt = g.tensor(f"g{i}", shape)
        g.custom("SdGelu", [cur], [nxt], _gelu("none"))
        cur = nxt
    g.output(cur)
    return g.build()


@pytest.mark.parametrize("gelu_count, internal_buffers", [(1, 1), (2, 2), (3, 2)])
def test_chained_ops_share_one_partition_and_a_planned_arena(rng, gelu_count, internal_buffers):
    shape = (1, 8, 6, 16)
    attrs = GN.GroupNormAttrs(groups=4, activation="silu", channel_axis=-1)
    gamma = rng.standard_normal(16).astype(np.float32)
    beta = rng.standard_normal(16).astype(np.float32)
    x = rng.standard_normal(shape, dtype=np.float32)
    result = run(_chain_model(shape, attrs, gelu_count, gamma, beta), {"x": x}, num_threads=2)
    expected = GN.reference([x, gamma, beta], attrs)
    for _ in range(gelu_count):
        expected = G.reference([expected], G.GeluAttrs("none"))
    assert_close(result.outputs[f"g{gelu_count - 1}"], expected)
    stats = result.stats
    assert stats["claimed_nodes"] == 1 + gelu_count
    # Internal tensors live in the arena; lifetimes [i, i+1] let the planner reuse memory, so a chain of
    # N internal tensors never needs more than 2 buffers at once.
    tensor_bytes = int(np.prod(shape)) * 4
    assert stats["max_arena_bytes"] == internal_buffers * tensor_bytes


def test_resizing_inputs_reprepares_with_new_shapes(rng):
    delegate = native.load(num_threads=2)
    interpreter = make_interpreter(gelu_model([2, 8], _gelu("none")), delegate)
    interpreter.allocate_tensors()
    for shape in ([3, 5], [1, 4097], [2, 8]):
        in_index = interpreter.get_input_details()[0]["index"]
        interpreter.resize_tensor_input(in_index, shape)
        interpreter.allocate_tensors()
        x = rng.standard_normal(shape, dtype=np.float32)
        interpreter.set_tensor(in_index, x)
        interpreter.invoke()
        y = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
        assert y.shape == tuple(shape)
        assert_close(y, G.reference([x], G.GeluAttrs("none")))
    assert native.stats(delegate)["prepares"] >= 3


def test_declined_node_is_logged_with_its_reason(capfd):
    delegate = native.load(num_threads=1)
    interpreter = make_interpreter(gelu_model([4], flex({"approximate": "fast"})), delegate)
    with pytest.raises(RuntimeError, match="unresolved custom op: SdGelu"):
        interpreter.allocate_tensors()
    err = capfd.readouterr().err
    assert "sdgpu: WARNING: declining node 0 (SdGelu): SdGelu: attribute 'approximate' = 'fast' is not one of none|tanh|quick" in err
    stats = native.stats(delegate)
    assert stats["declined_nodes"] == 1 and stats["claimed_nodes"] == 0
    assert stats["declined"][0]["reason"].startswith("SdGelu: attribute 'approximate'")


def test_log_level_silent_suppresses_warnings(capfd):
    delegate = native.load(num_threads=1, log_level="silent")
    interpreter = make_interpreter(gelu_model([4], flex({"approximate": "fast"})), delegate)
    with pytest.raises(RuntimeError):
        interpreter.allocate_tensors()
    assert "sdgpu:" not in capfd.readouterr().err
