"""Suitability, buffer sizes, cost model and the planner's modes / memory budget / JSON round trip."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sdconvert.errors import UserError
from sdconvert.configs import SD15, TINY
from sdconvert.winograd.buffers import kernel_buffers, kernel_flops
from sdconvert.winograd.convspec import ConvSpec, suitability
from sdconvert.winograd.cost import GiB, MiB, PROFILES, estimate, get_profile, num_tiles, parse_bytes, runs_winograd
from sdconvert.winograd.plan import WinogradPlan, make_plan, parse_mode, short_conv_name
from sdconvert.winograd.sd_shapes import unet_convs

BIG = ConvSpec("big", 1, 64, 64, 320, 320)
SMALL_MAP = ConvSpec("small_map", 1, 8, 8, 1280, 1280)
THIN_IN = ConvSpec("conv_in", 1, 64, 64, 4, 320)
THIN_OUT = ConvSpec("conv_out", 1, 64, 64, 320, 4)


@pytest.mark.parametrize("spec, reason", [
    (ConvSpec("x", 1, 8, 8, 4, 4, kernel_h=1, kernel_w=1), "kernel 1x1"),
    (ConvSpec("x", 1, 8, 8, 4, 4, stride_h=2, stride_w=2), "stride 2x2"),
    (ConvSpec("x", 1, 8, 8, 4, 4, dilation_h=2, dilation_w=2), "dilation 2x2"),
    (ConvSpec("x", 1, 8, 8, 4, 4, groups=2), "groups 2"),
    (ConvSpec("x", 1, 8, 8, 4, 4, activation="gelu"), "activation gelu"),
    (ConvSpec("x", 1, 8, 8, 4, 4, dtype="int8"), "dtype int8"),
    (ConvSpec("x", 1, 8, 8, 4, 4, filter_is_constant=False), "filter not constant"),
    (ConvSpec("x", 1, 2, 2, 4, 4, padding="VALID"), "empty output"),
])
def test_unsuitable_convs_say_why(spec: ConvSpec, reason: str) -> None:
    assert suitability(spec) == (False, reason)


def test_suitable_conv() -> None:
    assert suitability(BIG) == (True, "3x3 s1")
    assert suitability(ConvSpec("v", 1, 10, 10, 4, 4, padding="VALID", activation="relu6"))[0]


def test_kernel_buffers_include_tile_padding() -> None:
    b = kernel_buffers(SMALL_MAP, 6)              # 8x8 output -> 2x2 tiles of 6x6 (12x12 computed)
    assert (b.tiles_h, b.tiles_w, b.num_tiles) == (2, 2, 4)
    assert b.transformed_weights == 64 * 1280 * 1280
    assert b.transformed_input == 64 * 4 * 1280 and b.gemm_output == 64 * 4 * 1280
    b4 = kernel_buffers(ConvSpec("v", 2, 10, 10, 3, 5, padding="VALID"), 4)   # 8x8 output, 2 images
    assert b4.num_tiles == 2 * 2 * 2 and b4.scratch == 36 * 8 * (3 + 5)
    direct = kernel_buffers(BIG, 0)
    assert direct.scratch == 0 and direct.transformed_weights == 0 and direct.weights == 9 * 320 * 320


def test_kernel_flops_gemm_stage() -> None:
    f = kernel_flops(BIG, 4)
    assert f.gemm == 2 * 36 * 16 * 16 * 320 * 320
    assert kernel_flops(BIG, 0).gemm == 2 * BIG.macs == 2 * 64 * 64 * 320 * 320 * 9
    assert 0 < f.input_transform < f.gemm and 0 < f.output_transform < f.gemm


def test_estimate_memory_matches_buffers() -> None:
    # the bytes the delegate holds on an fp16 profile: F6's U and every tile's V / M stay float32, F2's U is half
    p = get_profile("adreno740")
    e = estimate(SMALL_MAP, 6, p)
    assert e.weight_bytes == 4 * 64 * 1280 * 1280
    assert e.scratch_bytes == 4 * 64 * 4 * (1280 + 1280)
    e2 = estimate(SMALL_MAP, 2, p)
    assert e2.weight_bytes == 2 * 16 * 1280 * 1280
    assert e2.scratch_bytes == 4 * 16 * num_tiles(SMALL_MAP, 2) * (1280 + 1280)
    assert estimate(SMALL_MAP, 0, p).memory_bytes == 0


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_cost_model_shape_trends(profile: str) -> None:
    p = get_profile(profile)
    t = {s.name: {m: estimate(s, m, p).time_s for m in (0, 2, 4, 6)} for s in (BIG, SMALL_MAP, THIN_IN, THIN_OUT)}
    if profile == "cpu":   # calibrated: XNNPACK's direct conv beats our portable Winograd kernels
        assert t["big"][0] < min(t["big"][2], t["big"][4], t["big"][6])
    else:                  # GPUs: big maps and channels -> large tiles win, F2 beats direct
        assert min(t["big"][4], t["big"][6]) < t["big"][2] < t["big"][0]
    # an 8x8 map pads F(6) to 12x12: F4 is predicted faster than F6
    assert t["small_map"][4] < t["small_map"][6]
    # 4-channel convs (conv_in/conv_out): transforms dominate, direct wins
    for name in ("conv_in", "conv_out"):
        assert t[name][0] < min(t[name][2], t[name][4], t[name][6])


def test_modes_on_sd15_unet() -> None:
    specs = unet_convs(SD15, batch=2)
    suitable = sum(suitability(s)[0] for s in specs)
    assert (len(specs), suitable) == (98, 49)
    off = make_plan(specs, "off", "adreno740")
    assert off.counts() == {"direct": 98, "F2": 0, "F4": 0, "F6": 0} and off.memory_bytes == 0
    forced = make_plan(specs, 4, "adreno740")
    assert forced.counts() == {"direct": 49, "F2": 0, "F4": 49, "F6": 0}
    assert all((d.tile == 4) == d.suitable for d in forced.decisions)
    assert forced.memory_bytes > forced.memory_budget
    # F4 on the 8x8 map gives 2*4 tiles < min_tiles (16): the GPU backend runs those direct
    assert forced.notes[0].startswith("14 conv(s) have fewer than 16 tiles at F4: the adreno740 GPU backend")
    assert forced.notes[1].startswith("forced --winograd 4 needs")
    unlimited = make_plan(specs, "auto", "adreno740", memory_budget=1 << 50)
    assert all(d.tile == d.recommended for d in unlimited.decisions)
    assert unlimited.predicted_s < forced.predicted_s < off.predicted_s


def test_gpu_profiles_pay_for_whole_gemm_row_tiles() -> None:
    # SD1.5's 8x8 map with 1280 channels: F4 has T = 4 tiles, one quarter of the skinny 16-row GEMM tile
    sixteen, eight = ConvSpec("l2", 1, 16, 16, 1280, 1280), ConvSpec("l3", 1, 8, 8, 1280, 1280)
    h200, cpu = get_profile("h200"), get_profile("cpu")
    assert (h200.gemm_tile_m, h200.min_tiles, cpu.gemm_tile_m, cpu.min_tiles) == (16, 16, 1, 1)
    assert not runs_winograd(eight, 4, h200) and runs_winograd(eight, 2, h200) and runs_winograd(eight, 4, cpu)
    padded = replace(h200, min_tiles=1, gemm_flops=1e12)  # compute-bound, so the padded rows show
    unpadded = replace(padded, gemm_tile_m=1)
    g4 = kernel_flops(eight, 4).gemm
    # 16 rows paid for 4 used: the GEMM stage alone costs 4x its useful FLOPs
    assert estimate(eight, 4, padded).time_s > 4 * g4 / padded.gemm_flops > estimate(eight, 4, unpadded).time_s
    d16, d8 = (make_plan([s], "auto", "h200", memory_budget=1 << 40).decisions[0] for s in (sixteen, eight))
    assert (d16.tile, sorted(d16.predicted)) == (4, [0, 2, 4])  # F6: 9 tiles; H200: F4 0.13 < F2 0.15 ms
    assert (d8.tile, sorted(d8.predicted)) == (2, [0, 2])          # F4/F6 give 4 tiles: not candidates


def test_mobile_profile_keeps_winograd_scratch_within_one_buffer() -> None:
    # SD1.5's VAE at 512 x 512: the last upsampler's conv (256 -> 256 channels on the 512 x 512 map). Its float32
    # transformed input and output are one scratch buffer in the delegate: F2 2 GiB, F4 1.2 GB, F6 0.97 GB, and an
    # OpenCL buffer on Adreno holds ~1 GiB (max_buffer_bytes), so there only F6 (or direct) runs; the H200 has no
    # such limit in its profile.
    up = ConvSpec("vae/up2/upsample", 1, 512, 512, 256, 256)
    phone, h200 = get_profile("adreno740"), get_profile("h200")
    assert phone.max_buffer_bytes == GiB and h200.max_buffer_bytes is None
    assert [runs_winograd(up, t, phone) for t in (0, 2, 4, 6)] == [True, False, False, True]
    assert all(runs_winograd(up, t, h200) for t in (0, 2, 4, 6))
    auto = make_plan([up], "auto", "adreno740", memory_budget=1 << 50).decisions[0]
    assert auto.tile in (0, 6) and sorted(auto.predicted) == [0, 6]
    forced = make_plan([up], "2", "adreno740", memory_budget=1 << 50)
    assert forced.notes[0].startswith("1 conv(s) at F2 need more than one 1024 MiB buffer")


def test_auto_respects_budget_and_more_budget_never_hurts() -> None:
    specs = unet_convs(SD15)
    prev = None
    for budget in (0, 64 * MiB, 256 * MiB, 1 * GiB, 4 * GiB, 64 * GiB):
        plan = make_plan(specs, "auto", "adreno740", memory_budget=budget)
        assert plan.memory_bytes <= budget
        assert all(d.tile == 0 for d in plan.decisions if not d.suitable)
        if prev is not None:
            assert plan.predicted_s <= prev + 1e-12
        prev = plan.predicted_s
    assert prev < make_plan(specs, "off", "adreno740").predicted_s
    zero = make_plan(specs, "auto", "adreno740", memory_budget=0)
    assert zero.counts()["direct"] == 98


def test_measured_times_override_the_model() -> None:
    spec = ConvSpec("m", 1, 64, 64, 320, 320)
    predicted = make_plan([spec], "auto", "h200", memory_budget=1 << 40).decisions[0]
    assert predicted.tile != 0 and predicted.source == "model"
    measured = {(spec.shape_key(), 0): 1e-6, (spec.shape_key(), 2): 1e-3, (spec.shape_key(), 4): 1e-3,
                (spec.shape_key(), 6): 1e-3}
    d = make_plan([spec], "auto", "h200", memory_budget=1 << 40, measured=measured).decisions[0]
    assert (d.tile, d.recommended, d.source) == (0, 0, "measured")
    assert d.predicted[0].time_s == 1e-6


def test_json_round_trip_and_table() -> None:
    specs = unet_convs(TINY)
    plan = make_plan(specs, "auto", "h200")
    data = json.loads(json.dumps(plan.to_json()))
    assert data["summary"]["convs"] == len(specs) and len(data["convs"]) == len(specs)
    again = WinogradPlan.from_json(data)
    assert again.to_json() == data
    table = plan.format_table().splitlines()
    assert table[0].startswith("| # | conv | N x H x W |")
    # one row per Winograd-suitable conv; the 1x1 and stride-2 convs only counted, by reason
    suitable = [d for d in plan.decisions if d.suitable]
    rows = [ln for ln in table[2:] if ln.startswith("| ")]
    assert [int(r.split("|")[1]) for r in rows] == [i for i, d in enumerate(plan.decisions) if d.suitable]
    assert len(rows) == len(suitable) == 26
    reasons = {}
    for d in plan.decisions:
        if not d.suitable:
            reasons[d.reason] = reasons.get(d.reason, 0) + 1
    assert reasons == {"kernel 1x1": 21, "stride 2x2": 2}
    assert (f"not listed: 23 convs Winograd cannot replace (kernel 1x1: 21, stride 2x2: 2); they stay direct "
            "(every conv is in the manifest's winograd plan)") in table
    assert any(ln.startswith("winograd=auto profile=h200") for ln in table)


def test_table_names_are_short() -> None:
    """TFLite tensor names (~300 characters) shortened to their innermost module scopes."""
    long = ("sdconvert.export.wrappers.UNet/diffusers.models.unets.unet_2d_condition.UNet2DConditionModel_unet/"
            "diffusers.models.unets.unet_2d_blocks.CrossAttnDownBlock2D_0/diffusers.models.resnet.ResnetBlock2D_0/"
            "torch.nn.modules.conv.Conv2d_conv1;2")
    assert short_conv_name(long) == ".../CrossAttnDownBlock2D_0/ResnetBlock2D_0/Conv2d_conv1"
    assert short_conv_name("sdconvert.export.wrappers.VaeDecoder/torch.nn.modules.conv.Conv2d_conv_in;2") == (
        "VaeDecoder/Conv2d_conv_in")
    assert short_conv_name("down_blocks.0.resnets.0.conv1") == "down_blocks.0.resnets.0.conv1"  # no class: kept
    plan = make_plan([ConvSpec(long, 1, 8, 8, 32, 32)], "4", "h200")
    assert "| .../CrossAttnDownBlock2D_0/ResnetBlock2D_0/Conv2d_conv1 | 1x8x8 |" in plan.format_table()
    assert max(len(line) for line in plan.format_table().splitlines()[:3]) < 150


def test_user_errors() -> None:
    assert parse_mode(" AUTO ") == "auto" and parse_mode(6) == "6"
    with pytest.raises(UserError, match=r"--winograd must be one of off, auto, 2, 4, 6; got '8'"):
        parse_mode("8")
    with pytest.raises(UserError, match="unknown device profile 'tpu'"):
        get_profile("tpu")
    assert parse_bytes("1.5GiB") == 3 * GiB // 2 and parse_bytes("512MiB") == 512 * MiB
    assert parse_bytes(1000) == 1000 and parse_bytes("2GB") == 2 * 10 ** 9
    with pytest.raises(UserError, match="--memory-budget: cannot parse 'lots'"):
        parse_bytes("lots")
