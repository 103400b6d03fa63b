"""SD1.5-shaped attention benchmark models (batch 1): the unfused litert-torch lowering of scaled_dot_product_attention
(RESHAPE/TRANSPOSE/BATCH_MATMUL/MUL/SOFTMAX, runs on XNNPACK) and the same graph after `sdconvert` fusion
(one SdAttention) with attention_variant flash, partial_softmax and auto (what `sdconvert --fuse` picks).

Usage: python scripts/cpu_attention_models.py OUT_DIR   ->  OUT_DIR/{name}_{plain,flash,partial_softmax,auto}.tflite
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from sdconvert.export.litert import convert_to_tflite
from sdconvert.rewrite import fuse_model

# name, Sq, Sk, heads, head_dim: the SD1.5 UNet's attention shapes at 512x512 (self- and cross-attention per level)
SHAPES = [("self4096", 4096, 4096, 8, 40), ("cross4096x77", 4096, 77, 8, 40), ("self1024", 1024, 1024, 8, 80),
          ("cross1024x77", 1024, 77, 8, 80), ("self256", 256, 256, 8, 160), ("cross256x77", 256, 77, 8, 160),
          ("self64", 64, 64, 8, 160)]


class Core(torch.nn.Module):
    def __init__(self, heads: int, head_dim: int) -> None:
        super().__init__()
        self.h, self.d = heads, head_dim

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, sq, _ = q.shape
        sk = k.shape[1]
        q = q.view(b, sq, self.h, self.d).transpose(1, 2)
        k = k.view(b, sk, self.h, self.d).transpose(1, 2)
        v = v.view(b, sk, self.h, self.d).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, sq, self.h * self.d)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, sq, sk, heads, hd in SHAPES:
        kw = {"q": torch.randn(1, sq, heads * hd), "k": torch.randn(1, sk, heads * hd),
              "v": torch.randn(1, sk, heads * hd)}
        plain = out / f"{name}_plain.tflite"
        convert_to_tflite(Core(heads, hd).eval(), kw, plain)
        for variant in ("flash", "partial_softmax", "auto"):
            fuse_model(plain, out / f"{name}_{variant}.tflite", attention_variant=variant)


if __name__ == "__main__":
    main()
