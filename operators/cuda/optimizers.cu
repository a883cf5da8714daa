// The ai.onnx.preview.training optimizer updates on the device, element by element with the
// rules of optimizer_math.hpp in double (as the CPU kernel computes them), fp32 or fp16 storage.
// Outputs not asked for are null and not written.
#include <cuda_fp16.h>

#include "operators/cuda/device_kernels.hpp"
#include "operators/cuda/device_math.cuh"

namespace volt::cuda {
namespace {

template <class T>
__device__ inline void store_if(T* p, int64_t i, double v) {
  if (p) store(p, i, static_cast<float>(v));
}

// Adagrad and Momentum: one state tensor each.
template <class T, class Rule>
__global__ void one_state_kernel(Rule rule, T* x_out, T* s_out, const T* x, const T* g,
                                 const T* state, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double xv = load(x, i), sv = load(state, i);
    rule.update(xv, static_cast<double>(load(g, i)), sv);
    store_if(x_out, i, xv);
    store_if(s_out, i, sv);
  }
}

template <class T>
__global__ void adam_kernel(optim::Adam rule, double rate, T* x_out, T* v_out, T* h_out, const T* x,
                            const T* g, const T* v, const T* h, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double xv = load(x, i), vv = load(v, i), hv = load(h, i);
    rule.update(xv, static_cast<double>(load(g, i)), vv, hv, rate);
    store_if(x_out, i, xv);
    store_if(v_out, i, vv);
    store_if(h_out, i, hv);
  }
}

}  // namespace

void launch_optimizer(const OptimizerUpdate& u, Elem t, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const int blocks = blocks_for(n);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* out[3] = {static_cast<T*>(u.out[0]), static_cast<T*>(u.out[1]), static_cast<T*>(u.out[2])};
    const T* in[4] = {static_cast<const T*>(u.in[0]), static_cast<const T*>(u.in[1]),
                      static_cast<const T*>(u.in[2]), static_cast<const T*>(u.in[3])};
    switch (u.rule) {
      case OptimizerRule::Adagrad:
        one_state_kernel<<<blocks, kThreads, 0, s>>>(u.adagrad, out[0], out[1], in[0], in[1], in[2],
                                                     n);
        break;
      case OptimizerRule::Momentum:
        one_state_kernel<<<blocks, kThreads, 0, s>>>(u.momentum, out[0], out[1], in[0], in[1],
                                                     in[2], n);
        break;
      case OptimizerRule::Adam:
        adam_kernel<<<blocks, kThreads, 0, s>>>(u.adam, u.adam.rate(), out[0], out[1], out[2],
                                                in[0], in[1], in[2], in[3], n);
        break;
    }
  };
  if (t == Elem::F32)
    run(float{});
  else
    run(__half{});
}

}  // namespace volt::cuda
