// Adversarial kernel source: the same linear+sigmoid kernel, launched on a stream of its own that the
// caller's stream never waits for (the caller's CUDA events see none of the work).
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void adv_side_linear_sigmoid_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                               const float* __restrict__ b, float* __restrict__ out,
                                               int rows, int in_features, int out_features) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * out_features) return;
    int row = idx / out_features, col = idx % out_features;
    double acc = b[col];
    for (int k = 0; k < in_features; ++k) {
        acc += (double)x[row * in_features + k] * (double)w[col * in_features + k];
    }
    out[idx] = (float)(1.0 / (1.0 + exp(-acc)));
}

torch::Tensor adv_side_linear_sigmoid(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    static cudaStream_t side = nullptr;
    if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    auto xc = x.contiguous(), wc = w.contiguous(), bc = b.contiguous();
    int rows = xc.size(0), in_features = xc.size(1), out_features = wc.size(0);
    auto out = torch::empty({rows, out_features}, xc.options());
    int n = rows * out_features, threads = 256;
    adv_side_linear_sigmoid_kernel<<<(n + threads - 1) / threads, threads, 0, side>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
        rows, in_features, out_features);
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("adv_side_linear_sigmoid", &adv_side_linear_sigmoid, "sigmoid(x @ W^T + b) on a side stream");
}
