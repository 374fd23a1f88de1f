"""The transposing kernels' tile geometry (runtime.py's `FFTiles`), run on the host with g++.

The pointwise tiled kernel and `ff_channels_last` move [N, C, S] tensors through shared memory one tile
at a time. A C++ program enumerates every tile of many shapes and checks what the kernels rely on: the
tiles cover every element exactly once; both orders (along channels, along positions) visit the same
2048 elements of a tile, in distinct shared-memory slots inside the buffer; a warp reading along positions
hits 32 distinct banks; and no lane idles when C is a power of two up to 32 (the reason for the geometry).
"""

import subprocess

import pytest
from compile_check import GXX

from fuseforge.codegen.runtime import TILES, TYPES

CHECKER = r"""
#define __host__
#define __device__
#define __forceinline__ inline
#include <cstdio>
#include <set>
#include <tuple>
#include <vector>
""" + TYPES + TILES + r"""
static int failures = 0;
#define EXPECT(cond, ...) do { if (!(cond)) { ++failures; if (failures < 20) { printf(__VA_ARGS__); printf("\n"); } } } while (0)

static void check(int64_t N, int64_t C, int64_t S) {
    const FFTiles tiles(N, C, S);
    const int width = 1 << tiles.log_width, span = 1 << tiles.log_span;
    int want = 1;
    while (want < C && want < 32) want *= 2;
    EXPECT(width == want, "C=%lld: width %d, want %d", (long long)C, width, want);
    EXPECT(width * span == FF_TILE_ELEMENTS, "C=%lld: %d x %d elements", (long long)C, width, span);
    std::vector<int> seen(N * C * S, 0);
    for (int64_t t = 0; t < tiles.count; ++t) {
        int64_t n, c0, s0;
        tiles.origin(t, n, c0, s0);
        std::set<std::pair<int, int>> by_channels, by_positions;
        std::set<int> slots;
        for (int k = 0; k < FF_TILE_ELEMENTS; ++k) {
            int p, c;
            tiles.along_channels(k, p, c);
            by_channels.insert({p, c});
            const int slot = tiles.slot(p, c);
            EXPECT(slot >= 0 && slot < FF_TILE_SLOTS, "slot %d outside the buffer", slot);
            slots.insert(slot);
            if (n < N && c0 + c < C && s0 + p < S) seen[(n * C + c0 + c) * S + s0 + p] += 1;
            tiles.along_positions(k, p, c);
            by_positions.insert({p, c});
        }
        EXPECT(by_channels.size() == FF_TILE_ELEMENTS && by_channels == by_positions,
               "C=%lld S=%lld tile %lld: the two orders differ", (long long)C, (long long)S, (long long)t);
        EXPECT(slots.size() == FF_TILE_ELEMENTS, "shared-memory slots collide");
    }
    for (size_t e = 0; e < seen.size(); ++e)
        EXPECT(seen[e] == 1, "N=%lld C=%lld S=%lld: element %zu covered %d times", (long long)N, (long long)C,
               (long long)S, e, seen[e]);
    for (int warp = 0; warp < FF_TILE_ELEMENTS / 32; ++warp) {
        std::set<int> banks;
        int p0, c0;
        tiles.along_positions(warp * 32, p0, c0);
        for (int lane = 0; lane < 32; ++lane) {
            int p, c;
            tiles.along_positions(warp * 32 + lane, p, c);
            EXPECT(c == c0 && p == p0 + lane, "along positions a warp is not 32 consecutive positions of a channel");
            banks.insert(tiles.slot(p, c) % 32);
        }
        EXPECT(banks.size() == 32, "C=%lld: a warp reading along positions hits %zu banks", (long long)C, banks.size());
    }
}

int main() {
    for (int64_t N : {1, 3})
        for (int64_t C : {1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 64, 100})
            for (int64_t S : {1, 7, 130, 2049})
                check(N, C, S);
    printf("failures %d\n", failures);
    return failures == 0 ? 0 : 1;
}
"""


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_tiles_cover_every_element_once_and_keep_every_lane_busy(tmp_path):
    source, binary = tmp_path / "tiles.cpp", tmp_path / "tiles"
    source.write_text(CHECKER)
    built = subprocess.run([GXX, "-std=c++17", "-O1", "-o", str(binary), str(source)], capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "failures 0" in run.stdout, run.stdout
