"""Euler ancestral sampler (k-diffusion ``sample_euler_ancestral``) in sigma space.

Stochastic: every step adds fresh Gaussian noise, passed in by the pipeline as ``noise`` (so the random
stream, and hence parity with another implementation, is under the caller's control).
The UNet input is scaled by ``1/sqrt(sigma^2+1)``; initial noise is scaled by ``sigma_max``.
"""
from __future__ import annotations

import numpy as np

from sdlite.errors import SdliteError
from sdlite.schedulers.base import Scheduler, SchedulerConfig, check_num_steps, check_prediction_type, spaced_timesteps


class EulerAncestralScheduler(Scheduler):
    name = "euler_a"
    default_spacing = "linspace"

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        check_prediction_type(config, ("epsilon", "v_prediction"), self.name)
        self.sigmas = np.zeros(1, dtype=np.float32)

    @property
    def stochastic(self) -> bool:
        return True

    @property
    def init_noise_sigma(self) -> np.float32:
        sigma_max = self.sigmas.max()
        if (self.config.timestep_spacing or self.default_spacing) in ("linspace", "trailing"):
            return sigma_max
        return (sigma_max**2 + 1) ** 0.5

    def set_timesteps(self, num_steps: int) -> None:
        check_num_steps(num_steps, self.config)
        self.num_inference_steps = num_steps
        timesteps = spaced_timesteps(self.config, num_steps, self.default_spacing).astype(np.float32)
        train_sigmas = (((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5).astype(np.float64)
        sigmas = np.interp(timesteps, np.arange(len(train_sigmas)), train_sigmas)
        self.sigmas = np.concatenate([sigmas, [0.0]]).astype(np.float32)
        self.timesteps = timesteps.astype(np.float64)

    def scale_model_input(self, sample: np.ndarray, step_index: int) -> np.ndarray:
        sigma = self.sigmas[step_index]
        return (sample / (sigma**2 + 1) ** 0.5).astype(np.float32)

    def step(
        self, model_output: np.ndarray, step_index: int, sample: np.ndarray, noise: np.ndarray | None = None
    ) -> np.ndarray:
        if noise is None:
            raise SdliteError("euler_a needs a noise array per step")
        sigma = self.sigmas[step_index]
        sigma_to = self.sigmas[step_index + 1]
        if self.config.prediction_type == "epsilon":
            x0 = sample - sigma * model_output
        else:  # v_prediction
            x0 = model_output * (-sigma / (sigma**2 + 1) ** 0.5) + sample / (sigma**2 + 1)
        sigma_up = (sigma_to**2 * (sigma**2 - sigma_to**2) / sigma**2) ** 0.5
        sigma_down = (sigma_to**2 - sigma_up**2) ** 0.5
        derivative = (sample - x0) / sigma
        prev = sample + derivative * (sigma_down - sigma)
        return (prev + noise * sigma_up).astype(np.float32)

    def add_noise(self, original: np.ndarray, noise: np.ndarray, step_index: int) -> np.ndarray:
        return (original + noise * self.sigmas[step_index]).astype(np.float32)
