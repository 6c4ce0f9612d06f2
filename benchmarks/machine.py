"""The machine a speed figure was measured on: CPU model, cores, the SIMD flags that matter for matmuls,
and the thread counts. Printed beside every ratio, since ratios move between machines."""
from __future__ import annotations

import os

from headcut.timing import cpu_info

SIMD = ("avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "neon", "sve")


def machine() -> dict:
    cpu = cpu_info()
    import torch

    return {"cpu": cpu.model, "cores": os.cpu_count(), "simd": [f for f in SIMD if f in cpu.flags],
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__}


def describe(info: dict | None = None) -> str:
    info = info or machine()
    return (f"{info['cpu']}, {info['cores']} cores, {' '.join(info['simd']) or 'no AVX'}; "
            f"torch {info['torch']} with {info['torch_threads']} threads")
