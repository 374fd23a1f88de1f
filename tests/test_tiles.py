"""The transposing kernels' tile geometry (`cuda/tiles.cuh`'s `FFTiles`), run on the host with g++.

The pointwise tiled kernel and `ff_channels_last` move [N, C, S] tensors through shared memory one tile
at a time. A C++ program enumerates every tile of many shapes and checks what the kernels rely on: the
tiles cover every element exactly once; both orders (along channels, along positions) visit the same
FF_TILE_ELEMENTS elements of a tile, eight per thread (two quads), in distinct shared-memory slots inside the buffer; with quads
(16-byte accesses) only where C and S are multiples of 4 and the data aligned, and then 16-byte aligned
slots; on the channels-last side quads wherever C is a multiple of 4 and the data aligned (channel_quads); single elements read along positions hit 32 distinct banks per warp; and no lane idles when C is
a power of two up to 32 (the reason for the geometry). It also runs FFTiles' memory phases, every thread of
a block one after another and a phase only once all threads finished the one before (the kernels'
__syncthreads()): load_nchw then store_channels_last transposes (ff_channels_last), and load_channels_last
reads the result back into the same tile (the pointwise tiled kernel), with 32- and 64-bit indices.
"""

import subprocess

import pytest
from compile_check import GXX, host_program

from fuseforge.codegen.runtime import TILES, TYPES

CHECKER = r"""
#define __host__
#define __device__
#define __forceinline__ inline
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <vector>
// Host stand-ins for the CUDA that the tile phases use: a block's threads run one after another.
struct float4 { float x, y, z, w; };
static float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
template <typename T> static T __ldg(const T* p) { return *p; }
static struct { unsigned x; } threadIdx;
""" + TYPES + TILES + r"""
static int failures = 0;
#define EXPECT(cond, ...) do { if (!(cond)) { ++failures; if (failures < 20) { printf(__VA_ARGS__); printf("\n"); } } } while (0)

// The elements thread k moves, in one order: (position, channel) pairs.
static std::vector<std::pair<int, int>> items(const FFTiles& tiles, int k, bool along_channels) {
    std::vector<std::pair<int, int>> out;
    int p, c;
    if (tiles.quads || (along_channels && tiles.channel_quads)) {  // the channels-last side: quads with channel_quads
        for (int j = 0; j < FF_TILE_QUADS; ++j)
            for (int e = 0; e < 4; ++e) {
                if (along_channels) { tiles.quad_along_channels(j * FF_TILE_THREADS + k, p, c); out.push_back({p, c + e}); }
                else { tiles.quad_along_positions(j * FF_TILE_THREADS + k, p, c); out.push_back({p + e, c}); }
            }
        return out;
    }
    for (int j = 0; j < 4 * FF_TILE_QUADS; ++j) {
        if (along_channels) tiles.element_along_channels(j * FF_TILE_THREADS + k, p, c);
        else tiles.element_along_positions(j * FF_TILE_THREADS + k, p, c);
        out.push_back({p, c});
    }
    return out;
}

static void check(int64_t N, int64_t C, int64_t S, bool aligned) {
    const FFTiles tiles(N, C, S, aligned);
    const int width = 1 << tiles.log_width, span = 1 << tiles.log_span;
    int want = 1;
    while (want < C && want < 32) want *= 2;
    EXPECT(width == want, "C=%lld: width %d, want %d", (long long)C, width, want);
    EXPECT(width * span == FF_TILE_ELEMENTS, "C=%lld: %d x %d elements", (long long)C, width, span);
    EXPECT(tiles.quads == (aligned && C % 4 == 0 && S % 4 == 0), "C=%lld S=%lld: quads %d", (long long)C,
           (long long)S, (int)tiles.quads);
    EXPECT(tiles.channel_quads == (aligned && C % 4 == 0), "C=%lld S=%lld: channel quads %d", (long long)C,
           (long long)S, (int)tiles.channel_quads);
    std::vector<int> seen(N * C * S, 0);
    for (int64_t t = 0; t < tiles.count; ++t) {
        int64_t n, c0, s0;
        tiles.origin(t, n, c0, s0);
        std::set<std::pair<int, int>> by_channels, by_positions;
        std::set<int> slots;
        for (int k = 0; k < FF_TILE_THREADS; ++k) {
            for (auto [p, c] : items(tiles, k, true)) {
                by_channels.insert({p, c});
                const int slot = tiles.slot(p, c);
                EXPECT(slot >= 0 && slot < FF_TILE_SLOTS, "slot %d outside the buffer", slot);
                slots.insert(slot);
                if (c0 + c < C && s0 + p < S) seen[(n * C + c0 + c) * S + s0 + p] += 1;
            }
            for (auto pc : items(tiles, k, false)) by_positions.insert(pc);
            for (int j = 0; tiles.quads && j < FF_TILE_QUADS; ++j) {  // a quad along positions: one 16-byte access
                int p, c;
                tiles.quad_along_positions(j * FF_TILE_THREADS + k, p, c);
                EXPECT(tiles.slot(p, c) % 4 == 0, "a quad's slot %d is not 16-byte aligned", tiles.slot(p, c));
            }
        }
        EXPECT(by_channels.size() == FF_TILE_ELEMENTS && by_channels == by_positions,
               "C=%lld S=%lld tile %lld: the two orders differ", (long long)C, (long long)S, (long long)t);
        EXPECT(slots.size() == FF_TILE_ELEMENTS, "shared-memory slots collide");
    }
    for (size_t e = 0; e < seen.size(); ++e)
        EXPECT(seen[e] == 1, "N=%lld C=%lld S=%lld: element %zu covered %d times", (long long)N, (long long)C,
               (long long)S, e, seen[e]);
    if (!tiles.quads) {  // single elements: a warp reading along positions takes 32 of one channel, 32 banks
        for (int warp = 0; warp < FF_TILE_ELEMENTS / 32; ++warp) {
            std::set<int> banks;
            int p0, c0;
            tiles.element_along_positions(warp * 32, p0, c0);
            for (int lane = 0; lane < 32; ++lane) {
                int p, c;
                tiles.element_along_positions(warp * 32 + lane, p, c);
                EXPECT(c == c0 && p == p0 + lane, "along positions a warp is not 32 consecutive positions");
                banks.insert(tiles.slot(p, c) % 32);
            }
            EXPECT(banks.size() == 32, "C=%lld: a warp reading along positions hits %zu banks", (long long)C,
                   banks.size());
        }
    }
}

// Every tile through FFTiles' phases, each phase run by all FF_TILE_THREADS threads before the next starts.
template <typename index_t>
static void check_phases(int64_t N, int64_t C, int64_t S, bool aligned) {
    const FFTiles tiles(N, C, S, aligned);
    std::vector<float> nchw(N * C * S), channels_last(N * C * S, -1.0f);
    for (size_t e = 0; e < nchw.size(); ++e) nchw[e] = (float)e;
    std::vector<float> tile(FF_TILE_SLOTS), again(FF_TILE_SLOTS);
    const index_t C_ = (index_t)C, S_ = (index_t)S;
    for (int64_t t = 0; t < tiles.count; ++t) {
        int64_t n, c0, s0;
        tiles.origin(t, n, c0, s0);
        std::fill(tile.begin(), tile.end(), -1.0f);
        std::fill(again.begin(), again.end(), -1.0f);
        for (threadIdx.x = 0; threadIdx.x < FF_TILE_THREADS; ++threadIdx.x)
            tiles.load_nchw(tile.data(), nchw.data(), n, c0, s0, C_, S_);
        for (int c = 0; c < 1 << tiles.log_width; ++c)
            for (int p = 0; p < 1 << tiles.log_span; ++p) {
                const bool inside = c0 + c < C && s0 + p < S;
                const float want = inside ? nchw[(n * C + c0 + c) * S + s0 + p] : -1.0f;
                EXPECT(tile[tiles.slot(p, c)] == want, "C=%lld S=%lld quads %d: load_nchw put %g at (%d, %d), "
                       "want %g", (long long)C, (long long)S, (int)tiles.quads, tile[tiles.slot(p, c)], p, c, want);
            }
        for (threadIdx.x = 0; threadIdx.x < FF_TILE_THREADS; ++threadIdx.x)
            tiles.store_channels_last(tile.data(), channels_last.data(), n, c0, s0, C_, S_);
        for (threadIdx.x = 0; threadIdx.x < FF_TILE_THREADS; ++threadIdx.x)
            tiles.load_channels_last(again.data(), channels_last.data(), n, c0, s0, C_, S_);
        EXPECT(again == tile, "C=%lld S=%lld quads %d tile %lld: load_channels_last read another tile",
               (long long)C, (long long)S, (int)tiles.quads, (long long)t);
    }
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t s = 0; s < S; ++s)
                EXPECT(channels_last[(n * S + s) * C + c] == nchw[(n * C + c) * S + s],
                       "N=%lld C=%lld S=%lld quads %d: (%lld, %lld, %lld) not transposed", (long long)N,
                       (long long)C, (long long)S, (int)tiles.quads, (long long)n, (long long)c, (long long)s);
}

int main(int argc, char** argv) {
    const bool phases = argc > 1 && std::string(argv[1]) == "phases";  // else the geometry
    for (int64_t N : {1, 3})
        for (int64_t C : {1, 2, 3, 4, 5, 8, 16, 17, 20, 31, 32, 33, 64, 100})
            for (int64_t S : {1, 7, 12, 130, 2049, 2052})
                for (bool aligned : {false, true}) {
                    if (!phases) {
                        check(N, C, S, aligned);
                    } else {
                        check_phases<uint32_t>(N, C, S, aligned);
                        check_phases<int64_t>(N, C, S, aligned);
                    }
                }
    printf("failures %d\n", failures);
    return failures == 0 ? 0 : 1;
}
"""


@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ is not installed")
    return host_program(CHECKER, tmp_path_factory.mktemp("tiles"), "tiles", "-O1", "-fno-strict-aliasing")


def test_tiles_cover_every_element_once_and_keep_every_lane_busy(checker):
    run = subprocess.run([str(checker)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "failures 0" in run.stdout, run.stdout


def test_the_tile_phases_transpose_to_channels_last_and_read_it_back_into_the_same_tile(checker):
    run = subprocess.run([str(checker), "phases"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "failures 0" in run.stdout, run.stdout


def test_the_transpose_lab_compiles_for_hopper_without_spills(tmp_path):
    """dev/kernels/transpose_lab.cu, the tiles' design lab (run on a GPU by hand): every kernel builds for sm_90a with
    no spills, the persistent prefetching variant included."""
    import re
    import shutil
    from pathlib import Path

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    lab = Path(__file__).resolve().parents[1] / "dev" / "kernels" / "transpose_lab.cu"
    proc = subprocess.run(["nvcc", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-c", str(lab),
                           "-o", str(tmp_path / "lab.o")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    kernels = re.findall(r"Compiling entry function '(\w+)'", proc.stderr)
    assert any("prefetch_rows_kernel" in k for k in kernels), proc.stderr
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
    assert len(spills) == len(kernels) and all(s == ("0", "0") for s in spills), proc.stderr
