// Quantization arithmetic shared by the quantized kernels: the ONNX quantization ops
// (quantize.cpp) and the oneDNN int8 kernels with their fallback (quantized_linear.cpp), so that
// every path gives the same integers: exact integer accumulation, float32 division by the scale
// as the spec computes it, round half to even, saturation.
#pragma once
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "operators/common/matmul_shapes.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "runtime/graph.hpp"

namespace volt {

// Rounds half to even and saturates into the range of the integer type `t` (NaN becomes 0:
// it has no quantized value, and converting it to an integer is undefined).
int64_t saturate(double v, DType t);

// Writes the integer `v` as element i of t (uint8, int8, int16, uint16, int32).
void store_integer(Tensor& t, int64_t i, int64_t v);

// Σ (X - x_zero_point) · (W - w_zero_point) over a convolution's window, exactly (int32 out).
// `w_zp` is null, one value, or one per output channel.
Tensor integer_conv(const ConvShapes& s, const Tensor& x, int64_t x_zp, const Tensor& w,
                    const Tensor* w_zp);

// (A - a_zp) x (B - b_zp) in int64 over numpy matmul's shapes (1-D operands, broadcast batch
// axes); a_zp per row or scalar, b_zp per column or scalar (null: zero).
std::vector<int64_t> integer_matmul(const Tensor& a, const Tensor& b, const Tensor* azp,
                                    const Tensor* bzp, const MatMulShapes& s);

// Scales must be positive and finite: zero divides, a negative scale flips the data, NaN
// poisons it. `what` names them in the error ("x", "w", "y").
void check_scales(const Tensor& scales, const Node& node, const char* what);

// Round half to even for |v| < 2^22 in the default rounding mode, in a form compilers vectorize
// (std::nearbyint is a libm call): adding and subtracting 1.5 * 2^23 drops the fraction.
inline float round_half_even(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// One value: saturate(round(v / scale) + zero_point) into [lo, hi] (uint8's or int8's), NaN to
// 0; the loops below and the fused quantized ops all quantize through it.
inline float quantize_value(float v, float scale, float zero_point, float lo, float hi) {
  float q = v / scale;              // in float, as the spec divides
  q = q < -1024.0f ? -1024.0f : q;  // beyond saturates anyway; keeps the rounding exact
  q = q > 1024.0f ? 1024.0f : q;
  float t = round_half_even(q) + zero_point;
  t = t < lo ? lo : t;
  t = t > hi ? hi : t;
  return t == t ? t : 0.0f;  // NaN
}

// y = saturate(round(x / scale) + zero_point) into uint8 or int8, NaN to 0 (one thread; wide
// registers where the CPU has them).
void quantize_span(const float* x, int64_t n, float scale, int32_t zero_point, uint8_t* y);
void quantize_span(const float* x, int64_t n, float scale, int32_t zero_point, int8_t* y);

// y = (x - zero_point) · scale in float (DequantizeLinear's arithmetic: the integer difference is
// exact, so its product with the scale rounds once, as it does in double).
void dequantize_span(const uint8_t* x, int64_t n, int32_t zero_point, float scale, float* y);
void dequantize_span(const int8_t* x, int64_t n, int32_t zero_point, float scale, float* y);

// DynamicQuantizeLinear's parameters for data x: the range [min(x, 0), max(x, 0)] over 255 steps.
struct DynamicRange {
  float scale = 0;
  int32_t zero_point = 0;
};
DynamicRange dynamic_range(const float* x, int64_t n);
// x quantized with `r` (all zero points when the scale is 0: x was all zeros).
void dynamic_quantize(const float* x, int64_t n, const DynamicRange& r, uint8_t* y);

}  // namespace volt
