"""The flat pointwise path's divisions by magic numbers (`cuda/types.cuh`: `ff_set_divisor`, `ff_div32`), run on
the host with g++ against the exact quotient.

With 32-bit indices the flat kernels split an element index into coordinates by multiplying with a precomputed
magic number instead of dividing by each dim's size; a wrong magic number or shift gives a wrong operand offset
for some index, so the program compares every quotient it can afford with i / size: all sizes up to 4096 with
every index below four times the size and indices around each multiple up to 2^31, and sizes near every power of
two up to 2^31 - 1 with the indices at the ends of the 32-bit range.
"""

import subprocess

import pytest
from compile_check import GXX, host_program

from fuseforge.codegen.runtime import TYPES

CHECKER = TYPES + r"""
#include <cstdio>
#include <initializer_list>
static long failures = 0, checked = 0;
static void expect(uint32_t i, int64_t size, uint32_t magic, int shift) {
    ++checked;
    const uint32_t q = ff_div32(i, magic, shift);
    if (q != (uint32_t)(i / (uint64_t)size) && ++failures < 20)
        printf("size %lld index %u: %u, not %llu\n", (long long)size, i, q, (unsigned long long)(i / (uint64_t)size));
}
static void sweep(int64_t size, bool dense) {
    uint32_t magic; int shift;
    ff_set_divisor(size, magic, shift);
    const uint64_t last = ((uint64_t)1 << 31) - 1;  // the largest index of the 32-bit path
    if (dense)
        for (uint64_t i = 0; i < 4 * (uint64_t)size && i <= last; ++i) expect((uint32_t)i, size, magic, shift);
    const uint64_t step = dense ? (uint64_t)size * 997 : (uint64_t)size;
    for (uint64_t m = size; m <= last + 1; m += step)  // around multiples: q changes there
        for (int64_t e = -1; e <= 1; ++e)
            if ((int64_t)m + e >= 0 && (uint64_t)((int64_t)m + e) <= last) expect((uint32_t)(m + e), size, magic, shift);
    for (uint64_t i = last; i > last - 64; --i) expect((uint32_t)i, size, magic, shift);
}
int main() {
    for (int64_t size = 1; size <= 4096; ++size) sweep(size, true);
    for (int p = 12; p <= 31; ++p)
        for (int64_t e = -3; e <= 3; ++e) {
            const int64_t size = ((int64_t)1 << p) + e;
            if (size >= 1 && size < ((int64_t)1 << 31)) sweep(size, false);
        }
    for (int64_t size : {3LL * 5 * 7 * 11 * 13, 130LL * 130, 256LL * 256, 66LL * 66 * 18, 1000003LL, 2147483647LL})
        sweep(size, false);
    printf("checked %ld failures %ld\n", checked, failures);
    return failures != 0;
}
"""


@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ is not installed")
    return host_program(CHECKER, tmp_path_factory.mktemp("divisors"), "divisors", "-O2")


def test_the_magic_divisors_give_the_exact_quotient_of_every_index_of_the_32_bit_path(checker):
    run = subprocess.run([str(checker)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "failures 0" in run.stdout, run.stdout
    assert int(run.stdout.split()[1]) > 10_000_000, run.stdout  # the sweep ran


def test_a_wrong_magic_number_is_caught(tmp_path):
    """The checker itself: with the magic number one too small, some quotient is wrong and it says so."""
    if GXX is None:
        pytest.skip("g++ is not installed")
    broken = CHECKER.replace("ff_set_divisor(size, magic, shift);", "ff_set_divisor(size, magic, shift); magic -= 1;")
    assert broken != CHECKER
    run = subprocess.run([str(host_program(broken, tmp_path, "broken", "-O2"))], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0 and "failures 0" not in run.stdout
