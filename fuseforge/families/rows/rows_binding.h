
// Row kernels: a row is the values of the reduced axes [lo, hi) of the row shape: the last `axes` axes
// (contiguous rows), or the channel axis 1 of [N, C, *S] (rows of C values S apart). Every operand is
// checked against its class and made contiguous: full (the row shape), col (one value per column:
// broadcast along the other axes), row (one value per row: broadcast along the reduced axes), row-flat
// (one value per row, broadcast against the per-row shape without the reduced axes), scalar (one value).
// A broadcast col or row operand is expanded to one value per column or row.
enum FFRowClass { FF_ROW_FULL = 0, FF_ROW_COL = 1, FF_ROW_ROW = 2, FF_ROW_ROW_FLAT = 3, FF_ROW_SCALAR = 4 };

struct FFRows {
    std::vector<int64_t> sizes;  // the row shape of this call
    int64_t lo, hi;              // the reduced axes
    int64_t rows, cols;
    int64_t positions;           // product of the sizes after the reduced axes: 1 for trailing rows

    std::vector<int64_t> lead() const {  // the per-row shape without the reduced axes
        std::vector<int64_t> k(sizes.begin(), sizes.begin() + lo);
        k.insert(k.end(), sizes.begin() + hi, sizes.end());
        return k;
    }
    std::vector<int64_t> trail() const { return {sizes.begin() + lo, sizes.begin() + hi}; }
    std::vector<int64_t> kept() const {  // the per-row shape with the reduced axes kept (size 1)
        std::vector<int64_t> k = sizes;
        for (int64_t d = lo; d < hi; ++d) k[d] = 1;
        return k;
    }
};

// The rows of `full`: its last `axes` axes (channels false), or its axis 1 (channels true).
static FFRows ff_rows_of(const char* kernel, const torch::Tensor& full, int axes, bool channels) {
    const int64_t rank = full.dim();
    TORCH_CHECK(channels ? rank >= 3 : (rank >= axes && axes >= 1), kernel, ": the row input has ", rank,
                " axes");
    FFRows r;
    r.sizes = full.sizes().vec();
    r.lo = channels ? 1 : rank - axes;
    r.hi = channels ? 2 : rank;
    r.rows = 1;
    r.cols = 1;
    r.positions = 1;
    for (int64_t d = 0; d < rank; ++d) {
        (d >= r.lo && d < r.hi ? r.cols : r.rows) *= r.sizes[d];
        if (d >= r.hi) r.positions *= r.sizes[d];
    }
    TORCH_CHECK(r.rows < (int64_t(1) << 31) && r.cols < (int64_t(1) << 31), kernel, ": more than 2^31 rows or columns");
    return r;
}

// `t` broadcast to `to` as torch broadcasts (right-aligned, size-1 axes stretched), contiguous.
static torch::Tensor ff_row_broadcast(const char* kernel, const char* name, torch::Tensor t,
                                      const std::vector<int64_t>& to, const char* as) {
    while (t.dim() > (int64_t)to.size() && t.size(0) == 1) t = t.squeeze(0);
    bool ok = t.dim() <= (int64_t)to.size();
    for (int64_t d = 1; ok && d <= t.dim(); ++d) {
        const int64_t have = t.size(t.dim() - d), want = to[to.size() - d];
        ok = have == 1 || have == want;
    }
    TORCH_CHECK(ok, kernel, ": ", name, " of sizes ", t.sizes(), " does not broadcast to ", as, " ", to);
    return t.expand(to).contiguous();
}

static torch::Tensor ff_row_operand(const char* kernel, const char* name, const torch::Tensor& t, const FFRows& r,
                                    const torch::Tensor& first, int cls) {
    TORCH_CHECK(t.is_cuda(), kernel, ": ", name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat, kernel, ": ", name, " must be float32, got ", t.scalar_type());
    TORCH_CHECK(t.device() == first.device(), kernel, ": inputs must be on one device");
    if (cls == FF_ROW_FULL) {
        TORCH_CHECK(t.sizes().vec() == r.sizes, kernel, ": ", name, " has sizes ", t.sizes(), ", expected ", r.sizes);
        return t.contiguous();
    }
    if (cls == FF_ROW_SCALAR) {
        TORCH_CHECK(t.numel() == 1, kernel, ": ", name, " must hold one value");
        return t.contiguous();
    }
    if (cls == FF_ROW_ROW_FLAT) return ff_row_broadcast(kernel, name, t, r.lead(), "one value per row");
    const int64_t rank = (int64_t)r.sizes.size();
    TORCH_CHECK(t.dim() <= rank, kernel, ": ", name, " has more axes than the rows");
    if (cls == FF_ROW_ROW) return ff_row_broadcast(kernel, name, t, r.kept(), "one value per row");
    // FF_ROW_COL: size 1 along every axis but the reduced ones, which broadcast to the row's
    std::vector<int64_t> padded(rank - t.dim(), 1);
    padded.insert(padded.end(), t.sizes().begin(), t.sizes().end());
    for (int64_t d = 0; d < rank; ++d)
        TORCH_CHECK((d >= r.lo && d < r.hi) || padded[d] == 1, kernel, ": ", name, " of sizes ", t.sizes(),
                    " is not one value per column");
    const std::vector<int64_t> part(padded.begin() + r.lo, padded.begin() + r.hi);
    return ff_row_broadcast(kernel, name, t.reshape(part), r.trail(), "the row's axes");
}

static std::vector<int64_t> ff_per_row_sizes(const FFRows& r, bool keepdim) {
    return keepdim ? r.kept() : r.lead();
}

// Whether the channel rows of `full` (the kernel's one full input) are read as they are, channels-last (NHWC):
// a 4-D or 5-D channels-last tensor of at most kFFRowNhwcMaxChannels channels (the kernel's shared-memory tile of
// 128 rows). Otherwise the binding makes it contiguous (and `ff_row_operand` reports a tensor of the wrong device or
// dtype).
constexpr int64_t kFFRowNhwcMaxChannels = 256;
static bool ff_row_reads_nhwc(const torch::Tensor& full) {
    if (!full.is_cuda() || full.scalar_type() != torch::kFloat || full.is_contiguous() ||
        full.size(1) > kFFRowNhwcMaxChannels)
        return false;
    return (full.dim() == 4 && full.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
           (full.dim() == 5 && full.is_contiguous(at::MemoryFormat::ChannelsLast3d));
}
