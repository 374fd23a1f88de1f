
// Channel kernels: the sizes of one call, shared by kernels and binding. A unit is what statistics are
// taken over: a channel (batch norm: groups == 0) or one sample's group of C / G channels (group norm).
struct FFChanDims {
    int64_t batch, channels, hw;  // the full shape as [N, C, HW]
    int64_t groups;               // group norm's G; 0 for batch norm
    int64_t units, per_unit;      // batch norm: C units of N * HW values; group norm: N * G of C / G * HW
    bool columns;                 // batch norm over [N, C] (HW == 1): the column layout
    bool nhwc;                    // the one full-shape input is channels-last: nhwc_runtime.py
    int parts;                    // blocks (planes) or block rows (columns) per unit: ff_channel_parts;
                                  //   channels-last: parts of each sample's positions: ff_channel_nhwc_parts
};
constexpr int kFFChanThreads = 256;
constexpr int kFFChanMaxParts = 64;

// Parts per unit: about 1024 blocks in all, at least 4096 values (planes) or 64 rows (columns) per part,
// fewer than 2^24 values per part (counts are exact floats), at most kFFChanMaxParts.
inline int ff_channel_parts(int64_t units, int64_t per_unit, bool columns) {
    const int64_t tiles = columns ? (units + 31) / 32 : units;
    int64_t parts = (1024 + tiles - 1) / (tiles > 0 ? tiles : 1);
    const int64_t by_size = per_unit / (columns ? 64 : 4096);
    if (parts > by_size) parts = by_size;
    const int64_t exact = (per_unit >> 24) + 1;
    if (parts < exact) parts = exact;
    if (parts > kFFChanMaxParts) parts = kFFChanMaxParts;
    return (int)(parts < 1 ? 1 : parts);
}

// Channels-last: parts per sample; about 1024 statistics blocks of 32 channels in all, at least 256
// positions per part, fewer than 2^24 per part (counts are exact floats).
inline int ff_channel_nhwc_parts(int64_t batch, int64_t channels, int64_t hw) {
    const int64_t blocks = batch * ((channels + 31) / 32);
    int64_t parts = (1024 + blocks - 1) / blocks;
    if (parts > hw / 256) parts = hw / 256;
    const int64_t exact = (hw >> 24) + 1;
    if (parts < exact) parts = exact;
    return (int)(parts < 1 ? 1 : parts);
}

// Floats of statistics per (unit, part), or per (sample, part, channel) channels-last.
inline int64_t ff_chan_nhwc_partials(const FFChanDims& d) { return d.batch * d.parts * d.channels * 3; }
// The workspace of one call: the statistics, and channels-last also each unit's mean (hi, lo) and 1 / std.
inline int64_t ff_chan_workspace(const FFChanDims& d) {
    return d.nhwc ? ff_chan_nhwc_partials(d) + 3 * d.units : d.units * d.parts * 3;
}
