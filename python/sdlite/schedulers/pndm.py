"""PNDM sampler in its SD 1.x form: pseudo linear multistep (PLMS) only, ``skip_prk_steps=True``.

The Runge-Kutta warm-up of full PNDM is not implemented (SD 1.x configs skip it); a config asking for it is
rejected with a clear error. PLMS warms up with one extra UNet evaluation (a second-order Heun-like step), so
``timesteps`` has ``num_steps + 1`` entries, exactly as diffusers' ``PNDMScheduler``.
Trade-off: keeps up to four past model outputs (4 latent-sized float32 arrays).
"""
from __future__ import annotations

import numpy as np

from sdlite.errors import SdliteError
from sdlite.schedulers.base import Scheduler, SchedulerConfig, check_num_steps, check_prediction_type, spaced_timesteps


class PNDMScheduler(Scheduler):
    name = "pndm"
    default_spacing = "leading"

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        if not config.skip_prk_steps:
            raise SdliteError("scheduler pndm supports only skip_prk_steps=True (PLMS, the SD 1.x setting)")
        check_prediction_type(config, ("epsilon", "v_prediction"), self.name)
        self.final_alpha_cumprod = np.float32(1.0) if config.set_alpha_to_one else self.alphas_cumprod[0]
        self._reset()

    def _reset(self) -> None:
        self._ets: list[np.ndarray] = []
        self._counter = 0
        self._cur_sample: np.ndarray | None = None

    def set_timesteps(self, num_steps: int) -> None:
        check_num_steps(num_steps, self.config)
        self.num_inference_steps = num_steps
        base = spaced_timesteps(self.config, num_steps, self.default_spacing)[::-1].astype(np.int64)  # ascending
        plms = np.concatenate([base[:-1], base[-2:-1], base[-1:]])[::-1]
        self.timesteps = plms.astype(np.float64)
        self._reset()

    def step(
        self, model_output: np.ndarray, step_index: int, sample: np.ndarray, noise: np.ndarray | None = None
    ) -> np.ndarray:
        ratio = self.config.num_train_timesteps // self.num_inference_steps
        t = int(self.timesteps[step_index])
        prev_t = t - ratio
        if self._counter != 1:
            self._ets = [*self._ets[-3:], model_output]
        else:  # second warm-up evaluation: re-evaluates the first interval with the averaged slope
            prev_t, t = t, t + ratio
        ets = self._ets
        if len(ets) == 1 and self._counter == 0:
            eps = model_output
            self._cur_sample = sample
        elif len(ets) == 1 and self._counter == 1:
            eps = (model_output + ets[-1]) / 2
            assert self._cur_sample is not None
            sample, self._cur_sample = self._cur_sample, None
        elif len(ets) == 2:
            eps = (3 * ets[-1] - ets[-2]) / 2
        elif len(ets) == 3:
            eps = (23 * ets[-1] - 16 * ets[-2] + 5 * ets[-3]) / 12
        else:
            eps = (1 / 24) * (55 * ets[-1] - 59 * ets[-2] + 37 * ets[-3] - 9 * ets[-4])
        self._counter += 1
        return self._prev_sample(sample, t, prev_t, eps)

    def _prev_sample(self, sample: np.ndarray, t: int, prev_t: int, eps: np.ndarray) -> np.ndarray:
        """Formula (9) of the PNDM paper: x_{t-d} from x_t and the noise estimate."""
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.final_alpha_cumprod
        b_t, b_prev = np.float32(1) - a_t, np.float32(1) - a_prev
        if self.config.prediction_type == "v_prediction":
            eps = a_t**0.5 * eps + b_t**0.5 * sample
        sample_coeff = (a_prev / a_t) ** 0.5
        denom = a_t * b_prev**0.5 + (a_t * b_t * a_prev) ** 0.5
        return (sample_coeff * sample - (a_prev - a_t) * eps / denom).astype(np.float32)
