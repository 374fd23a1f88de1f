"""dev/kernels/conv_wgmma_rs lab: the few-channel direct convolution on tensor cores (3xTF32, wgmma with A from
registers) compiles for sm_90a without spills and without ptxas serialising its wgmmas, and its layouts are the ones
its text states: channel planes 8 floats past a multiple of 32 (a fragment load's 32 lanes on 32 banks), weight rows
in the 32-byte swizzle. CPU only: its speed and error are measured by bench_conv_rs.py on a GPU
(bench/results/2026-11-29d_gpu)."""

import sys
from pathlib import Path

import pytest
from compile_check import NVCC, lab_kernels_for_hopper

LAB = Path(__file__).resolve().parents[1] / "dev" / "kernels" / "conv_wgmma_rs"
sys.path.insert(0, str(LAB))
import bench_conv_rs as lab  # noqa: E402

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc")


@needs_nvcc
def test_every_instance_compiles_for_sm90a_with_no_spills_and_unserialised_wgmmas(tmp_path):
    assert len(lab_kernels_for_hopper(lab.source(), tmp_path, "conv_rs_kernel")) == sum(len(lab.variants_of(c)) for _, c, *_ in lab.INSTANCES)


SOURCE = (LAB / "conv_rs.cuh").read_text()


def _plane(th_in: int, tw_in: int) -> int:  # conv_rs.cuh's Cfg::kPlane
    assert "kThIn * kTwIn + ((8 - kThIn * kTwIn) % 32 + 32) % 32" in SOURCE
    return th_in * tw_in + ((8 - th_in * tw_in) % 32 + 32) % 32


@pytest.mark.parametrize("kh, kw", [(3, 3), (5, 5), (1, 1), (3, 7)])
def test_a_fragment_loads_32_lanes_hit_32_banks_at_every_tap(kh, kw):
    th_in, tw_in = 4 + kh - 1, 32 + kw - 1
    plane = _plane(th_in, tw_in)
    assert plane >= th_in * tw_in and plane % 32 == 8
    for q in range(4):
        for m in range(2):
            for r in range(kh):
                for s in range(kw):
                    banks = set()
                    for lane in range(32):
                        gq, tq = lane >> 2, lane & 3
                        p0 = 64 * m + 16 * q + gq
                        banks.add((tq * plane + (p0 // 32 + r) * tw_in + p0 % 32 + s) % 32)
                    assert len(banks) == 32, (q, m, r, s)


def test_the_weights_32_byte_swizzle_puts_each_rows_two_halves_once_in_each_256_byte_group():
    """A [64][8] tile of 32-byte rows: half h of row n at n * 32 + 16 (h ^ ((n >> 2) & 1)), as the kernel writes it
    (byte bit 4 flipped by bit 7, the layout TMA's 32-byte swizzle gives and desc_sw32 describes)."""
    assert "phys = o ^ (((o >> 7) & 1u) << 4)" in SOURCE

    def phys(o):
        return o ^ (((o >> 7) & 1) << 4)

    seen = set()
    for n in range(64):
        for kk in range(8):
            assert phys(n * 32 + kk * 4) // 32 == n  # a row stays in its own 32 bytes
            seen.add(phys(n * 32 + kk * 4))
    assert seen == set(range(0, 64 * 32, 4))
    assert [phys(n * 32) % 32 for n in range(8)] == [0, 0, 0, 0, 16, 16, 16, 16]  # rows 4-7 swap their halves
