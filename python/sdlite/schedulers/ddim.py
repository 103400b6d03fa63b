"""DDIM sampler (Song et al. 2020) with ``eta`` (0 = deterministic, the usual choice).

With ``eta > 0`` the step is stochastic and needs a ``noise`` array (drawn by the pipeline so the random
stream is explicit). Dynamic thresholding is not implemented (pixel-space models only; SD is latent-space).
"""
from __future__ import annotations

import numpy as np

from sdlite.errors import SdliteError
from sdlite.schedulers.base import Scheduler, SchedulerConfig, check_num_steps, check_prediction_type, spaced_timesteps


class DDIMScheduler(Scheduler):
    name = "ddim"
    default_spacing = "leading"

    def __init__(self, config: SchedulerConfig, eta: float = 0.0) -> None:
        super().__init__(config)
        check_prediction_type(config, ("epsilon", "sample", "v_prediction"), self.name)
        if eta < 0:
            raise SdliteError(f"ddim eta must be >= 0, got {eta}")
        self.eta = float(eta)
        self.final_alpha_cumprod = np.float32(1.0) if config.set_alpha_to_one else self.alphas_cumprod[0]

    @property
    def stochastic(self) -> bool:
        return self.eta > 0

    def set_timesteps(self, num_steps: int) -> None:
        check_num_steps(num_steps, self.config)
        self.num_inference_steps = num_steps
        self.timesteps = spaced_timesteps(self.config, num_steps, self.default_spacing).round().astype(np.float64)

    def step(
        self, model_output: np.ndarray, step_index: int, sample: np.ndarray, noise: np.ndarray | None = None
    ) -> np.ndarray:
        cfg = self.config
        t = int(self.timesteps[step_index])
        prev_t = t - cfg.num_train_timesteps // self.num_inference_steps
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.final_alpha_cumprod
        b_t = np.float32(1) - a_t
        if cfg.prediction_type == "epsilon":
            x0 = (sample - b_t**0.5 * model_output) / a_t**0.5
            eps = model_output
        elif cfg.prediction_type == "sample":
            x0 = model_output
            eps = (sample - a_t**0.5 * x0) / b_t**0.5
        else:  # v_prediction
            x0 = a_t**0.5 * sample - b_t**0.5 * model_output
            eps = a_t**0.5 * model_output + b_t**0.5 * sample
        if cfg.clip_sample:
            x0 = np.clip(x0, -cfg.clip_sample_range, cfg.clip_sample_range)
        b_prev = np.float32(1) - a_prev
        variance = (b_prev / b_t) * (np.float32(1) - a_t / a_prev)
        std = np.float32(self.eta) * variance**0.5
        direction = (np.float32(1) - a_prev - std**2) ** 0.5 * eps
        prev = a_prev**0.5 * x0 + direction
        if self.eta > 0:
            if noise is None:
                raise SdliteError("ddim with eta > 0 needs a noise array per step")
            prev = prev + std * noise
        return prev.astype(np.float32)
