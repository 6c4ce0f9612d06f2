"""The machine a speed figure was measured on: CPU model, cores, the SIMD flags that matter for matmuls,
and the thread counts and runtime versions. Printed beside every ratio, since ratios move between machines."""
from __future__ import annotations


def machine() -> dict:
    import torch

    from headcut.export.bench import machine_record

    record = machine_record()
    return {"cpu": record["cpu"]["model"], "cores": record["cpu"]["cores"], "simd": record["cpu"]["flags"],
            "torch_threads": torch.get_num_threads(), "runtimes": record["runtimes"]}


def describe(info: dict | None = None) -> str:
    info = info or machine()
    runtimes = ", ".join(f"{k} {v}" for k, v in info.get("runtimes", {}).items())
    return (f"{info['cpu']}, {info['cores']} cores, {' '.join(info['simd']) or 'no AVX'}; "
            f"{runtimes}; torch with {info['torch_threads']} threads")

