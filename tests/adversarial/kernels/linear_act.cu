// Kernels of the adversarial corpus (CUDA candidates load this file with torch.utils.cpp_extension.load).
// adv_linear_sigmoid: y = sigmoid(x @ W^T + b), one thread per output, double accumulation (more accurate
// than eager fp32). adv_sigmoid: the pointwise epilogue alone. adv_touch: a token kernel on one element.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void adv_linear_sigmoid_kernel(const float* __restrict__ x, const float* __restrict__ w,
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

// (its launch bounds hold parentheses, as generated kernels' may: the grader must still read its name as this file's)
__global__ void __launch_bounds__(256, sizeof(float) == 4 ? 4 : 1) adv_sigmoid_kernel(const float* __restrict__ in,
                                                                                   float* __restrict__ out, long n) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) out[idx] = 1.0f / (1.0f + expf(-in[idx]));
}

__global__ void adv_touch_kernel(float* p) { p[0] = p[0] + 0.0f; }

torch::Tensor adv_linear_sigmoid(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    auto xc = x.contiguous(), wc = w.contiguous(), bc = b.contiguous();
    int rows = xc.size(0), in_features = xc.size(1), out_features = wc.size(0);
    auto out = torch::empty({rows, out_features}, xc.options());
    int n = rows * out_features, threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    adv_linear_sigmoid_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
        rows, in_features, out_features);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

torch::Tensor adv_sigmoid(torch::Tensor in) {
    auto ic = in.contiguous();
    auto out = torch::empty_like(ic);
    long n = ic.numel();
    int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    adv_sigmoid_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(ic.data_ptr<float>(),
                                                                             out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

torch::Tensor adv_touch(torch::Tensor p) {
    adv_touch_kernel<<<1, 1, 0, c10::cuda::getCurrentCUDAStream()>>>(p.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return p;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("adv_linear_sigmoid", &adv_linear_sigmoid, "sigmoid(x @ W^T + b)");
    m.def("adv_sigmoid", &adv_sigmoid, "sigmoid");
    m.def("adv_touch", &adv_touch, "a token kernel");
}
