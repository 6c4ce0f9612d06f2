"""The CPU a grader runs on: what a speed figure needs beside it, and what decides which runtime fits.

Speed ratios between runtimes move with the CPU (ONNX Runtime vs PyTorch changed 2x between an AMD EPYC and an
Intel Xeon with AMX), so a measured choice is only reused on the same CPU model with the same matmul flags.
"""
from __future__ import annotations

import hashlib
import os

from headcut_grader.optional import Unimportable, optional_module
from headcut_grader.timing import Cpu, cpu_info

# The flags that change how matmuls run: vector width, int8 dot products (VNNI), bf16 (AVX512_BF16, AMX).
SIMD = ("avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8",
        "neon", "sve")


def simd_flags(cpu: Cpu | None = None) -> list[str]:
    cpu = cpu or cpu_info()
    return [f for f in SIMD if f in cpu.flags]


def bf16_native(cpu: Cpu | None = None) -> bool:
    """bf16 matmuls in hardware (AMX or AVX512_BF16); elsewhere a bf16 hint runs emulated or as f32."""
    flags = (cpu or cpu_info()).flags
    return "amx_bf16" in flags or "avx512_bf16" in flags


def cpu_record(cpu: Cpu | None = None) -> dict:
    """What grader.json and every speed table say about the CPU: model, cores, matmul flags, and a key."""
    cpu = cpu or cpu_info()
    return {"model": cpu.model, "cores": os.cpu_count(), "flags": simd_flags(cpu), "key": cpu_key(cpu)}


def cpu_key(cpu: Cpu | None = None) -> str:
    """Same key = same CPU model and matmul flags, so a speed ranking measured on one holds on the other."""
    cpu = cpu or cpu_info()
    text = cpu.model + "|" + " ".join(simd_flags(cpu))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def runtime_version(module: str) -> str | None:
    """A runtime's release ("2026.4.1", not OpenVINO's build string), or None where it is not installed or fails to
    import."""
    try:
        found = optional_module(module)
    except Unimportable:
        return None
    return found.__version__.split("-")[0] if found is not None else None


def describe(record: dict) -> str:
    return f"{record['model']}, {record['cores']} cores, {' '.join(record['flags']) or 'no AVX'}"


def clock_ghz() -> float:
    """The clock /proc/cpuinfo reports (the nominal one under most hypervisors); 0 where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "cpu MHz":
                    return float(value) / 1000
    except (OSError, ValueError):
        pass
    return 0.0


def flops_per_cycle(precision: str, cpu: Cpu | None = None) -> int:
    """Dense FLOPs (INT8: multiply-adds x 2) one core can issue per cycle at `precision`, assuming two vector
    FMA units: fp32 16 lanes x 2 x 2 with AVX-512, 8 x 2 x 2 with AVX2; bf16 AMX tiles 1024, AVX512_BF16 128;
    INT8 AMX 2048, AVX-512 VNNI 256, AVX-VNNI 128, else twice fp32. A ceiling to read achieved GFLOP/s
    against, not a promise: real kernels also wait on memory."""
    flags = (cpu or cpu_info()).flags
    fp32 = 64 if "avx512f" in flags else 32 if "fma" in flags else 16
    if precision.startswith("int8"):
        return (2048 if "amx_int8" in flags else 256 if "avx512_vnni" in flags else 128 if "avx_vnni" in flags
                else 2 * fp32)
    if precision == "bf16":
        return 1024 if "amx_bf16" in flags else 128 if "avx512_bf16" in flags else fp32
    return fp32


def peak_gflops(precision: str, *, threads: int, cpu: Cpu | None = None) -> float:
    """threads x clock x FLOPs per cycle: the most any runtime could reach (0 where the clock is unknown)."""
    return threads * clock_ghz() * flops_per_cycle(precision, cpu)
