
// The iteration space of a call: broadcast shape of the inputs, with dims merged where possible.
struct FFCall {
    FFShape shape;
    std::vector<FFOperand> operands;
    std::vector<int64_t> out_sizes;  // broadcast shape, as torch sees it
    int64_t numel;
    bool vectorizable;               // 16-byte loads and stores are safe (of the tiled operand when tiled)
    int tiled;                       // operand read through shared-memory tiles (channels-last), or -1
};

const char* ff_error_string(int code);

static FFCall ff_prepare(const char* kernel, const std::vector<torch::Tensor>& inputs) {
    FFCall call;
    std::vector<int64_t> sizes;
    for (size_t k = 0; k < inputs.size(); ++k) {
        const auto& t = inputs[k];
        TORCH_CHECK(t.is_cuda(), kernel, ": inputs must be CUDA tensors");
        TORCH_CHECK(t.scalar_type() == torch::kFloat, kernel, ": inputs must be float32, got ", t.scalar_type());
        TORCH_CHECK(t.device() == inputs[0].device(), kernel, ": inputs must be on one device");
        sizes = k == 0 ? t.sizes().vec() : at::infer_size(sizes, t.sizes());
    }
    call.out_sizes = sizes;
    call.numel = 1;
    for (auto s : sizes) call.numel *= s;
    // Expanded strides of every operand; dims of size 1 carry no information and are dropped.
    std::vector<std::vector<int64_t>> strides;
    for (const auto& t : inputs) strides.push_back(t.expand(sizes).strides().vec());
    std::vector<int64_t> dims;
    std::vector<std::vector<int64_t>> dim_strides(inputs.size());
    for (size_t d = 0; d < sizes.size(); ++d) {
        if (sizes[d] == 1) continue;
        bool merge = !dims.empty();
        for (size_t k = 0; merge && k < inputs.size(); ++k)
            merge = dim_strides[k].back() == strides[k][d] * sizes[d];
        if (merge) {
            dims.back() *= sizes[d];
            for (size_t k = 0; k < inputs.size(); ++k) dim_strides[k].back() = strides[k][d];
        } else {
            dims.push_back(sizes[d]);
            for (size_t k = 0; k < inputs.size(); ++k) dim_strides[k].push_back(strides[k][d]);
        }
    }
    TORCH_CHECK((int)dims.size() <= FF_MAX_RANK, kernel, ": more than ", FF_MAX_RANK, " non-mergeable dims");
    call.shape.rank = (int)dims.size();
    for (size_t d = 0; d < dims.size(); ++d) {
        call.shape.size[d] = dims[d];
        ff_set_divisor(dims[d], call.shape.magic[d], call.shape.shift[d]);
    }
    call.shape.inner = dims.empty() ? 1 : dims.back();
    call.vectorizable = call.numel % 4 == 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
        FFOperand op;
        op.ptr = inputs[k].data_ptr<float>();
        bool dense = true, scalar = true;
        int64_t expected = 1;
        for (int d = call.shape.rank - 1; d >= 0; --d) {
            op.stride[d] = dim_strides[k][d];
            dense = dense && op.stride[d] == expected;
            scalar = scalar && op.stride[d] == 0;
            expected *= dims[d];
        }
        op.inner_stride = dims.empty() ? 0 : op.stride[call.shape.rank - 1];
        op.mode = scalar ? FF_SCALAR : (dense ? FF_DENSE : FF_STRIDED);
        if (op.mode == FF_DENSE && reinterpret_cast<uintptr_t>(op.ptr) % 16 != 0) call.vectorizable = false;
        call.operands.push_back(op);
    }
    // Tiled: the merged space is [N, C, S] or [C, S] and an operand is channels-last over it (strides
    // [S*C, 1, C] or [1, C]): the first such operand is read a tile at a time (FFTiles), coalesced.
    call.tiled = -1;
    const int r = call.shape.rank;
    for (size_t k = 0; call.tiled < 0 && (r == 2 || r == 3) && k < inputs.size(); ++k) {
        const int64_t* st = call.operands[k].stride;
        const int64_t channels = dims[r - 2], positions = dims[r - 1];
        if (st[r - 2] == 1 && st[r - 1] == channels && channels > 1 && positions > 1 &&
            (r == 2 || st[0] == channels * positions))
            call.tiled = (int)k;
    }
    // The tiled kernel reads only the tiled operand 16 bytes at a time (FFTiles::quads adds C % 4 == 0 and
    // S % 4 == 0); its outputs are new tensors, so aligned.
    if (call.tiled >= 0)
        call.vectorizable = reinterpret_cast<uintptr_t>(call.operands[call.tiled].ptr) % 16 == 0;
    return call;
}

static void ff_check(const char* kernel, int code) {
    TORCH_CHECK(code == 0, kernel, ": CUDA error: ", ff_error_string(code));
}
