// Owning wrappers of the cuDNN descriptors the convolution and pooling kernels (forward and
// backward) describe their operands with. NCHW, fp32 or fp16; fewer than 4 dims padded with 1s.
#pragma once
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "operators/cpu/conv_geometry.hpp"
#include "operators/cuda/cuda_context.hpp"
#include "operators/registry.hpp"

namespace volt::cuda {

inline cudnnDataType_t dnn_type(DType t) {
  return t == DType::Float16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

// Tag of descriptors for channels-last 4-D operands (activations stored [N, H, W, C], weights
// [K, R, S, C]): the layout cuDNN's fp16 tensor-core convolutions read without transposing.
struct ChannelsLast {};

// Owning wrappers of the descriptors.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(DType t, const Shape& stored, ChannelsLast) {
    VOLT_CUDA_CALL(cudnnCreateTensorDescriptor(&d));
    VOLT_CUDA_CALL(cudnnSetTensor4dDescriptor(
        d, CUDNN_TENSOR_NHWC, dnn_type(t), static_cast<int>(stored[0]), static_cast<int>(stored[3]),
        static_cast<int>(stored[1]), static_cast<int>(stored[2])));
  }
  TensorDesc(DType t, const Shape& shape) {
    VOLT_CUDA_CALL(cudnnCreateTensorDescriptor(&d));
    Shape s = shape;
    while (s.size() < 4) s.push_back(1);  // cuDNN wants at least 4 dims
    std::vector<int> dims(s.begin(), s.end()), strides(s.size());
    int stride = 1;
    for (size_t i = s.size(); i-- > 0;) {
      strides[i] = stride;
      stride *= dims[i];
    }
    VOLT_CUDA_CALL(cudnnSetTensorNdDescriptor(d, dnn_type(t), static_cast<int>(dims.size()),
                                              dims.data(), strides.data()));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  // Logical [K, C/group, R, S], stored [K, R, S, C/group].
  FilterDesc(DType t, const Shape& kcrs, ChannelsLast) {
    VOLT_CUDA_CALL(cudnnCreateFilterDescriptor(&d));
    VOLT_CUDA_CALL(cudnnSetFilter4dDescriptor(
        d, dnn_type(t), CUDNN_TENSOR_NHWC, static_cast<int>(kcrs[0]), static_cast<int>(kcrs[1]),
        static_cast<int>(kcrs[2]), static_cast<int>(kcrs[3])));
  }
  FilterDesc(DType t, const Shape& shape) {
    VOLT_CUDA_CALL(cudnnCreateFilterDescriptor(&d));
    Shape s = shape;
    while (s.size() < 4) s.push_back(1);
    std::vector<int> dims(s.begin(), s.end());
    VOLT_CUDA_CALL(cudnnSetFilterNdDescriptor(d, dnn_type(t), CUDNN_TENSOR_NCHW,
                                              static_cast<int>(dims.size()), dims.data()));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

inline std::vector<int> padded_ints(const std::vector<int64_t>& v, size_t n, int fill) {
  std::vector<int> out(v.begin(), v.end());
  while (out.size() < n) out.push_back(fill);
  return out;
}

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const WindowGeometry& geo, DType t, int64_t group) {
    VOLT_CUDA_CALL(cudnnCreateConvolutionDescriptor(&d));
    const size_t r = std::max<size_t>(geo.kernel.size(), 2);
    const auto pads = padded_ints(geo.pad_begin, r, 0);
    const auto strides = padded_ints(geo.strides, r, 1);
    const auto dil = padded_ints(geo.dilations, r, 1);
    // fp16 data accumulates in fp32 (tensor cores where cuDNN has them).
    VOLT_CUDA_CALL(cudnnSetConvolutionNdDescriptor(d, static_cast<int>(r), pads.data(),
                                                   strides.data(), dil.data(),
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    VOLT_CUDA_CALL(cudnnSetConvolutionGroupCount(d, static_cast<int>(group)));
    VOLT_CUDA_CALL(cudnnSetConvolutionMathType(
        d, t == DType::Float16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// The cuDNN handle of the device this thread works on: plans are built on the thread that runs
// on the session's device.
inline cudnnHandle_t plan_time_dnn() {
  int device = 0;
  VOLT_CUDA_CALL(cudaGetDevice(&device));
  return handles(device).dnn;
}

// A convolution algorithm and the workspace it needs.
template <class Algo>
struct ConvAlgo {
  Algo algo;
  size_t workspace = 0;
};

// What names a convolution for the choice of its algorithm: every field of its descriptors
// (types, dims, strides, filter format, pads, strides, dilations, groups, math type).
std::string convolution_key(const char* direction, cudnnTensorDescriptor_t a,
                            cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                            cudnnTensorDescriptor_t b);

// Workspace an algorithm may ask for; faster ones that want more are passed over.
inline constexpr size_t kMaxConvWorkspace = size_t{512} << 20;

// The algorithm for a convolution, chosen once per process and key: the fastest of cuDNN's
// measured candidates (`find` runs each once) within kMaxConvWorkspace, or, where measuring
// fails, the first its heuristics rank (`fallback` when none). On an H200, cuDNN's own timings
// of one ResNet-50 layer (64->64, 3x3, 56x56) put the heuristics' first choice 1.1-1.5x behind
// the fastest (fp32 at batch 1: 98 us against 69; fp16 channels-last at batch 32: 102 against
// 67 in a separate timing).
template <class Algo, class Perf, class Find, class Heuristic, class Workspace>
ConvAlgo<Algo> choose_algo(const std::string& key, Algo fallback, Find find, Heuristic heuristic,
                           Workspace workspace) {
  static std::mutex mutex;
  static std::map<std::string, ConvAlgo<Algo>> chosen;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  }
  constexpr int kCandidates = 16;
  Perf perf[kCandidates];
  int found = 0;
  ConvAlgo<Algo> c{fallback};
  bool measured = false;
  if (find(kCandidates, &found, perf) == CUDNN_STATUS_SUCCESS) {
    for (int i = 0; i < found && !measured; ++i)  // (sorted by time)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxConvWorkspace) {
        c.algo = perf[i].algo;
        measured = true;
      }
  }
  if (!measured) {
    (void)cudaGetLastError();
    found = 0;
    VOLT_CUDA_CALL(heuristic(kCandidates, &found, perf));
    for (int i = 0; i < found; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) {
        c.algo = perf[i].algo;
        break;
      }
  }
  VOLT_CUDA_CALL(workspace(c.algo, &c.workspace));
  std::lock_guard<std::mutex> lock(mutex);
  chosen.emplace(key, c);
  return c;
}

inline ConvAlgo<cudnnConvolutionFwdAlgo_t> choose_forward(cudnnHandle_t h, const TensorDesc& x,
                                                          const FilterDesc& w, const ConvDesc& c,
                                                          const TensorDesc& y) {
  return choose_algo<cudnnConvolutionFwdAlgo_t, cudnnConvolutionFwdAlgoPerf_t>(
      convolution_key("fwd", x.d, w.d, c.d, y.d), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
      [&](int n, int* found, cudnnConvolutionFwdAlgoPerf_t* perf) {
        return cudnnFindConvolutionForwardAlgorithm(h, x.d, w.d, c.d, y.d, n, found, perf);
      },
      [&](int n, int* found, cudnnConvolutionFwdAlgoPerf_t* perf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, x.d, w.d, c.d, y.d, n, found, perf);
      },
      [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, x.d, w.d, c.d, y.d, a, bytes);
      });
}

// dX of Y = conv(X, W) from dY (also ConvTranspose's forward).
inline ConvAlgo<cudnnConvolutionBwdDataAlgo_t> choose_backward_data(cudnnHandle_t h,
                                                                    const FilterDesc& w,
                                                                    const TensorDesc& dy,
                                                                    const ConvDesc& c,
                                                                    const TensorDesc& dx) {
  return choose_algo<cudnnConvolutionBwdDataAlgo_t, cudnnConvolutionBwdDataAlgoPerf_t>(
      convolution_key("bwd_data", dx.d, w.d, c.d, dy.d), CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
      [&](int n, int* found, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
        return cudnnFindConvolutionBackwardDataAlgorithm(h, w.d, dy.d, c.d, dx.d, n, found, perf);
      },
      [&](int n, int* found, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w.d, dy.d, c.d, dx.d, n, found, perf);
      },
      [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w.d, dy.d, c.d, dx.d, a, bytes);
      });
}

inline ConvAlgo<cudnnConvolutionBwdFilterAlgo_t> choose_backward_filter(cudnnHandle_t h,
                                                                        const TensorDesc& x,
                                                                        const TensorDesc& dy,
                                                                        const ConvDesc& c,
                                                                        const FilterDesc& dw) {
  return choose_algo<cudnnConvolutionBwdFilterAlgo_t, cudnnConvolutionBwdFilterAlgoPerf_t>(
      convolution_key("bwd_filter", x.d, dw.d, c.d, dy.d), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
      [&](int n, int* found, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
        return cudnnFindConvolutionBackwardFilterAlgorithm(h, x.d, dy.d, c.d, dw.d, n, found, perf);
      },
      [&](int n, int* found, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x.d, dy.d, c.d, dw.d, n, found,
                                                             perf);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x.d, dy.d, c.d, dw.d, a, bytes);
      });
}

// A pooling descriptor for a resolved window (symmetric pads, no dilations).
struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolDesc(const WindowGeometry& geo, cudnnPoolingMode_t mode) {
    VOLT_CUDA_CALL(cudnnCreatePoolingDescriptor(&d));
    const size_t r = std::max<size_t>(geo.kernel.size(), 2);
    const auto window = padded_ints(geo.kernel, r, 1), pads = padded_ints(geo.pad_begin, r, 0),
               strides = padded_ints(geo.strides, r, 1);
    const cudnnStatus_t status =
        cudnnSetPoolingNdDescriptor(d, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(r),
                                    window.data(), pads.data(), strides.data());
    if (status != CUDNN_STATUS_SUCCESS) {
      cudnnDestroyPoolingDescriptor(d);
      check(status, "cudnnSetPoolingNdDescriptor");
    }
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

// What a pooling (or its gradient) prepares once per plan: the window's descriptor and its input
// and output tensors', channels-last where `channels_last` says (shapes as stored).
struct PoolState {
  std::unique_ptr<PoolDesc> pool;
  std::unique_ptr<TensorDesc> x, y;
};
inline std::shared_ptr<PoolState> pool_state(const WindowGeometry& geo, cudnnPoolingMode_t mode,
                                             DType t, const Shape& x, const Shape& y,
                                             bool channels_last) {
  auto st = std::make_shared<PoolState>();
  st->pool = std::make_unique<PoolDesc>(geo, mode);
  if (channels_last) {
    st->x = std::make_unique<TensorDesc>(t, x, ChannelsLast{});
    st->y = std::make_unique<TensorDesc>(t, y, ChannelsLast{});
  } else {
    st->x = std::make_unique<TensorDesc>(t, x);
    st->y = std::make_unique<TensorDesc>(t, y);
  }
  return st;
}

// A pooling window over `x` (N, C, spatial...) as cuDNN takes it: the whole input when `global`;
// KernelUnsupported for what cuDNN's descriptor cannot say (ceil rounding, asymmetric pads,
// dilations).
inline WindowGeometry pool_window(const WindowAttributes& attrs, bool global, const Shape& x,
                                  const Node& node) {
  if (x.size() < 3 || x.size() > 5) throw KernelUnsupported{"CUDA pooling takes 1-D to 3-D"};
  const Shape spatial(x.begin() + 2, x.end());
  WindowGeometry g;
  if (global) {
    g.kernel = g.in = spatial;
    g.strides.assign(spatial.size(), 1);
    g.dilations.assign(spatial.size(), 1);
    g.pad_begin.assign(spatial.size(), 0);
    g.pad_end.assign(spatial.size(), 0);
    g.out.assign(spatial.size(), 1);
    return g;
  }
  if (attrs.ceil_mode) throw KernelUnsupported{"CUDA pooling rounds output sizes down only"};
  g = resolve_window(attrs, spatial, attrs.kernel_shape, node);
  if (g.pad_begin != g.pad_end) throw KernelUnsupported{"CUDA pooling takes symmetric pads"};
  for (int64_t d : g.dilations)
    if (d != 1) throw KernelUnsupported{"CUDA pooling takes no dilations"};
  return g;
}

}  // namespace volt::cuda
