// Launchers of the .cu kernels, callable from ordinary C++ (the Kernel classes). Element types
// are fp32 or fp16 (`half`: IEEE binary16 storage); arithmetic is in fp32 either way, so fp16
// results are fp32 results rounded once.
#pragma once
#include <cstdint>

#include "operators/common/grad_fn.hpp"
#include "operators/common/optimizer_math.hpp"

namespace volt::cuda {

enum class Elem : uint8_t { F32, F16 };

// Broadcasting: up to kMaxRank dims; strides in elements, 0 along broadcast axes.
constexpr int kMaxRank = 8;
struct Broadcast {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
  int64_t c_strides[kMaxRank] = {};  // Where's condition
};

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Pow, Max, Min, AssignB };
void launch_binary(BinaryOp op, Elem t, void* out, const void* a, const void* b, int64_t n,
                   const Broadcast& shape, void* stream);

enum class UnaryOp : uint8_t {
  Relu,
  LeakyRelu,
  Sigmoid,
  Tanh,
  Exp,
  Log,
  Sqrt,
  Neg,
  Abs,
  Erf,
  Gelu,
  GeluTanh,
  Clip,
  HardSigmoid,
  Softplus,
  Identity,
  Scale  // alpha * x
};
// alpha/beta: LeakyRelu's slope, Clip's bounds, HardSigmoid's alpha and beta.
void launch_unary(UnaryOp op, Elem t, void* out, const void* x, int64_t n, float alpha, float beta,
                  void* stream);

// Where: out = cond ? a : b, each read through its strides in `shape` (c_strides: cond's).
void launch_where(Elem t, void* out, const bool* cond, const void* a, const void* b, int64_t n,
                  const Broadcast& shape, void* stream);

void launch_cast(Elem to, void* out, Elem from, const void* x, int64_t n, void* stream);

// Softmax (or LogSoftmax) over the last axis of [rows, cols], accumulated in fp32.
void launch_softmax(Elem t, void* out, const void* x, int64_t rows, int64_t cols, bool log,
                    void* stream);

// Attention's softmax in place over the last axis of the scores [rows, cols], after adding the
// mask (null: none) read at the offset `mask_rows` gives each row (dims: the scores' leading
// axes; a_strides: the mask's strides along them) plus column * mask_col_stride.
void launch_attention_softmax(Elem t, void* scores, const void* mask, int64_t rows, int64_t cols,
                              const Broadcast& mask_rows, int64_t mask_col_stride, void* stream);

// LayerNormalization over the last `cols` of [rows, cols]: statistics in fp32; scale and bias
// (fp32 or the element type, `cols` each; bias may be null).
void launch_layer_norm(Elem t, void* out, const void* x, const void* scale, const void* bias,
                       int64_t rows, int64_t cols, float epsilon, void* stream);

// out[i] = x[perm-strided index]: a transpose of up to kMaxRank dims. `in_strides` are the
// input's strides permuted into output order.
void launch_permute(int element_bytes, void* out, const void* x, int64_t n, int rank,
                    const int64_t* out_dims, const int64_t* in_strides, void* stream);

// Gather along an axis: out[o, j, i] = data[o, index[j], i] for o < outer, j < count, i < inner
// (`index` already checked and made non-negative, on the device).
void launch_gather(int element_bytes, void* out, const void* data, const int64_t* index,
                   int64_t outer, int64_t axis_size, int64_t count, int64_t inner, void* stream);

// Reductions: one output per kept index, over every reduced index, accumulated in fp32. An
// empty reduction gives what the CPU kernels give: 0 for sums and means, 1 for products, -inf
// for Max, LogSum and LogSumExp, +inf for Min.
enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSum, LogSumExp };
struct ReduceGeometry {
  int kept_rank = 0, reduced_rank = 0;
  int64_t kept_dims[kMaxRank] = {}, kept_strides[kMaxRank] = {};  // strides of x, in elements
  int64_t reduced_dims[kMaxRank] = {}, reduced_strides[kMaxRank] = {};
};
void launch_reduce(ReduceOp op, Elem t, void* out, const void* x, int64_t n_out, int64_t n_reduced,
                   const ReduceGeometry& g, void* stream);

// Backward kernels (backward.cu). dx = dy * f'(x, y) for y = f(x), elementwise over n;
// alpha: LeakyRelu's slope, Elu's alpha.
void launch_eltwise_grad(GradFn f, Elem t, void* dx, const void* dy, const void* x, const void* y,
                         int64_t n, float alpha, void* stream);
// Gather's gradient: out[o, index[j], i] += dy[o, j, i] (atomically; `out` zeroed first, `index`
// checked and non-negative, on the device).
void launch_scatter_add(Elem t, void* out, const void* dy, const int64_t* index, int64_t outer,
                        int64_t axis_size, int64_t count, int64_t inner, void* stream);
// out[i] = value for i < n.
void launch_fill(Elem t, void* out, int64_t n, float value, void* stream);
// Gradients over the last axis of [rows, cols], one block per row, sums in fp32: of Softmax (or
// LogSoftmax) from dY and the forward output Y; of LayerNormalization from dY, X and the scale
// (`scale_type`, also dscale's and dbias's; either may be null). `stats`: 2 * rows floats of
// device scratch.
void launch_softmax_grad(Elem t, void* dx, const void* dy, const void* y, int64_t rows,
                         int64_t cols, bool log, void* stream);
void launch_layer_norm_grad(Elem t, Elem scale_type, void* dx, void* dscale, void* dbias,
                            float* stats, const void* dy, const void* x, const void* scale,
                            int64_t rows, int64_t cols, float epsilon, void* stream);
// BatchNormalization's running statistics (ONNX's rule) from the batch's mean and inverse
// standard deviation 1/sqrt(var + epsilon), over c channels; either output may be null.
void launch_running_stats(float* out_mean, float* out_var, const float* mean, const float* var,
                          const float* batch_mean, const float* batch_inv_std, int64_t c,
                          float momentum, float epsilon, void* stream);

// One tensor's optimizer update (the ai.onnx.preview.training ops): `in` holds X, G and the
// states (one for Adagrad and Momentum, V and H for Adam); `out` the new X and states (null where
// not wanted). The rule's lr and t are this step's.
struct OptimizerUpdate {
  OptimizerRule rule = OptimizerRule::Adagrad;
  optim::Adagrad adagrad{};
  optim::Momentum momentum{};
  optim::Adam adam{};
  void* out[3] = {};
  const void* in[4] = {};
};
void launch_optimizer(const OptimizerUpdate& update, Elem t, int64_t n, void* stream);

}  // namespace volt::cuda
