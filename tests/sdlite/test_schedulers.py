"""Numpy schedulers vs diffusers, step by step, fed identical model outputs (and identical noise)."""
from __future__ import annotations

import diffusers
import numpy as np
import pytest
import torch

from sdlite.errors import SdliteError
from sdlite.schedulers import SCHEDULERS, DDIMScheduler, SchedulerConfig, make_scheduler
from sdlite.schedulers.base import linspace_f32

# runwayml/stable-diffusion-v1-5 scheduler/scheduler_config.json
SD1_SCHEDULER = {
    "_class_name": "PNDMScheduler", "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
    "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
    "clip_sample": False, "prediction_type": "epsilon", "trained_betas": None,
}
REFERENCES = {
    "pndm": (diffusers.PNDMScheduler, {}),
    "ddim": (diffusers.DDIMScheduler, {}),
    "euler_a": (diffusers.EulerAncestralDiscreteScheduler, {}),
    "dpmpp_2m": (diffusers.DPMSolverMultistepScheduler, {}),
    "dpmpp_2m_karras": (diffusers.DPMSolverMultistepScheduler, {"use_karras_sigmas": True}),
}
REL_TOL = 1e-6


def rel_err(ours: np.ndarray, ref: torch.Tensor) -> float:
    r = ref.numpy()
    return float(np.abs(ours - r).max() / np.abs(r).max())


def fake_unet(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """A deterministic stand-in for the UNet: depends on the sample and the timestep."""
    ramp = torch.arange(x.numel(), dtype=torch.float32).reshape(x.shape)
    return torch.tanh(x) * 0.8 + 0.05 * torch.sin(ramp * (t.float() + 1) / 97.0)


def reference(name: str, steps: int):
    cls, extra = REFERENCES[name]
    ref = cls.from_config({**SD1_SCHEDULER, **extra})
    ref.set_timesteps(steps)
    return ref


def test_registry_covers_references() -> None:
    assert set(SCHEDULERS) == set(REFERENCES)


def test_betas_bit_identical_to_torch_linspace() -> None:
    ref = diffusers.DDIMScheduler.from_config(SD1_SCHEDULER)
    ours = make_scheduler("ddim", SchedulerConfig.from_dict(SD1_SCHEDULER))
    np.testing.assert_array_equal(ours.betas, ref.betas.numpy())
    np.testing.assert_array_equal(ours.alphas_cumprod, ref.alphas_cumprod.numpy())
    for a, b, n in [(0.0001, 0.02, 1000), (0.3, -2.0, 37), (1.0, 5.0, 2)]:
        np.testing.assert_array_equal(linspace_f32(a, b, n), torch.linspace(a, b, n, dtype=torch.float32).numpy())


@pytest.mark.parametrize("steps", [20, 7])
@pytest.mark.parametrize("name", list(REFERENCES))
def test_matches_diffusers_step_by_step(name: str, steps: int) -> None:
    ref = reference(name, steps)
    ours = make_scheduler(name, SchedulerConfig.from_dict(SD1_SCHEDULER))
    ours.set_timesteps(steps)
    np.testing.assert_array_equal(ours.timesteps, ref.timesteps.numpy().astype(np.float64))
    assert float(ours.init_noise_sigma) == pytest.approx(float(ref.init_noise_sigma), rel=1e-7)

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 8, 8, generator=gen) * ref.init_noise_sigma
    y = x.numpy().copy()
    step_noise = torch.Generator().manual_seed(1)
    for i, t in enumerate(ref.timesteps):
        x_in = ref.scale_model_input(x, t)
        y_in = ours.scale_model_input(y, i)
        assert rel_err(y_in, x_in) <= REL_TOL
        eps = fake_unet(x_in, t)
        noise = None
        if ours.stochastic:  # draw the noise diffusers is about to draw, from a copy of its generator
            state = step_noise.get_state()
            noise = torch.randn(x.shape, generator=step_noise).numpy()
            step_noise.set_state(state)
            x = ref.step(eps, t, x, generator=step_noise).prev_sample
        else:
            x = ref.step(eps, t, x).prev_sample
        y = ours.step(eps.numpy(), i, y, noise)
        assert y.dtype == np.float32
        assert rel_err(y, x) <= REL_TOL, f"{name} step {i}: rel err {rel_err(y, x):.2e}"
    assert np.abs(y).max() > 0.1  # the trajectory did not collapse to zeros (which would match trivially)


def test_ddim_eta_matches_diffusers() -> None:
    ref = reference("ddim", 10)
    ours = DDIMScheduler(SchedulerConfig.from_dict(SD1_SCHEDULER), eta=0.7)
    ours.set_timesteps(10)
    assert ours.stochastic
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 4, 8, 8, generator=gen)
    y = x.numpy().copy()
    for i, t in enumerate(ref.timesteps):
        eps = fake_unet(x, t)
        noise = torch.randn(x.shape, generator=gen)
        x = ref.step(eps, t, x, eta=0.7, variance_noise=noise).prev_sample
        y = ours.step(eps.numpy(), i, y, noise.numpy())
        assert rel_err(y, x) <= REL_TOL


@pytest.mark.parametrize("name", list(REFERENCES))
def test_add_noise_and_img2img_start_match_diffusers(name: str) -> None:
    steps, strength = 20, 0.6
    ref = reference(name, steps)
    ours = make_scheduler(name, SchedulerConfig.from_dict(SD1_SCHEDULER))
    ours.set_timesteps(steps)
    start = ours.img2img_start(steps, strength)
    assert start == steps - int(steps * strength) == 8
    if hasattr(ref, "set_begin_index"):
        ref.set_begin_index(start)
    gen = torch.Generator().manual_seed(5)
    original, noise = torch.randn(1, 4, 8, 8, generator=gen), torch.randn(1, 4, 8, 8, generator=gen)
    expected = ref.add_noise(original, noise, ref.timesteps[start : start + 1])
    got = ours.add_noise(original.numpy(), noise.numpy(), start)
    assert rel_err(got, expected) <= REL_TOL


def test_unknown_scheduler_is_a_one_line_error() -> None:
    with pytest.raises(SdliteError, match=r"^unknown scheduler 'heun'; choose one of pndm, ddim, euler_a"):
        make_scheduler("heun")


def test_bad_config_and_steps_are_errors() -> None:
    with pytest.raises(SdliteError, match="skip_prk_steps=True"):
        make_scheduler("pndm", SchedulerConfig(skip_prk_steps=False))
    with pytest.raises(SdliteError, match=r"steps must be in \[1, 1000\], got 0"):
        make_scheduler("ddim").set_timesteps(0)
    with pytest.raises(SdliteError, match="unsupported beta_schedule 'cosine'"):
        make_scheduler("ddim", SchedulerConfig(beta_schedule="cosine"))


def test_config_from_dict_ignores_unknown_keys() -> None:
    cfg = SchedulerConfig.from_dict({**SD1_SCHEDULER, "foo": 1, "_diffusers_version": "0.6.0"})
    assert cfg.steps_offset == 1 and cfg.skip_prk_steps and cfg.beta_schedule == "scaled_linear"


def test_the_parser_names_every_scheduler_in_the_registry_order() -> None:
    from sdlite.scheduler_names import SCHEDULER_NAMES
    from sdlite.schedulers import SCHEDULERS

    assert SCHEDULER_NAMES == tuple(SCHEDULERS)
