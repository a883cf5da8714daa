#include "operators/cpu/quantization.hpp"

#include <immintrin.h>

#include <algorithm>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/cpu/quantize_avx512.hpp"
#include "runtime/error.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

template <class Q>
inline void quantize_loop(const float* x, int64_t n, float scale, int32_t zero_point, Q* y) {
  constexpr float lo = std::is_signed_v<Q> ? -128.0f : 0.0f,
                  hi = std::is_signed_v<Q> ? 127.0f : 255.0f;
  const float z = static_cast<float>(zero_point);
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<Q>(static_cast<int32_t>(quantize_value(x[i], scale, z, lo, hi)));
}

// The intrinsics paths below run where the CPU has AVX-512 (the library is built for baseline
// x86-64).
const bool kAvx512 = cpu_has_avx512f();

struct MinMax {
  float lo = 0, hi = 0;
};

// min and max with intrinsics: GCC vectorizes a float min/max reduction only when it may ignore
// NaN and the sign of zero (it emitted scalar vminss here, 5x slower on BERT's activations).
// min(v, acc) returns acc when v is NaN, so NaN inputs are skipped, as the reference's std::min
// skips them.
// GCC 12's _mm512_min_ps / _mm512_max_ps expand to masked builtins over an "undefined" vector
// that -Wmaybe-uninitialized flags in its own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) MinMax min_max_avx512(const float* x, int64_t n) {
  __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    lo = _mm512_min_ps(v, lo);
    hi = _mm512_max_ps(v, hi);
  }
  alignas(64) float l[16], h[16];
  _mm512_store_ps(l, lo);
  _mm512_store_ps(h, hi);
  MinMax m{0, 0};
  for (int k = 0; k < 16; ++k) {
    m.lo = std::min(m.lo, l[k]);
    m.hi = std::max(m.hi, h[k]);
  }
  for (; i < n; ++i) {
    m.lo = std::min(m.lo, x[i]);
    m.hi = std::max(m.hi, x[i]);
  }
  return m;
}

#pragma GCC diagnostic pop

MinMax min_max_sse(const float* x, int64_t n) {
  __m128 lo = _mm_setzero_ps(), hi = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    lo = _mm_min_ps(v, lo);
    hi = _mm_max_ps(v, hi);
  }
  alignas(16) float l[4], h[4];
  _mm_store_ps(l, lo);
  _mm_store_ps(h, hi);
  MinMax m{std::min(std::min(l[0], l[1]), std::min(l[2], l[3])),
           std::max(std::max(h[0], h[1]), std::max(h[2], h[3]))};
  for (; i < n; ++i) {
    m.lo = std::min(m.lo, x[i]);
    m.hi = std::max(m.hi, x[i]);
  }
  return m;
}

MinMax min_max_with_zero(const float* x, int64_t n) {
  return kAvx512 ? min_max_avx512(x, n) : min_max_sse(x, n);
}

constexpr int64_t kChunk = 1 << 14;  // elements per task of the parallel passes

}  // namespace

VOLT_SIMD_CLONES void dequantize_span(const uint8_t* x, int64_t n, int32_t zero_point, float scale,
                                      float* y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zero_point) * scale;
}
VOLT_SIMD_CLONES void dequantize_span(const int8_t* x, int64_t n, int32_t zero_point, float scale,
                                      float* y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zero_point) * scale;
}

namespace {

VOLT_SIMD_CLONES void quantize_portable(const float* x, int64_t n, float scale, int32_t zero_point,
                                        uint8_t* y) {
  quantize_loop(x, n, scale, zero_point, y);
}
VOLT_SIMD_CLONES void quantize_portable(const float* x, int64_t n, float scale, int32_t zero_point,
                                        int8_t* y) {
  quantize_loop(x, n, scale, zero_point, y);
}

// The same arithmetic in AVX-512 intrinsics: the compiler's version of the clamps (compares and
// blends on 256-bit registers, NaN kept apart) took 60% of a QDQ residual Add.
template <bool Signed>
__attribute__((target("avx512f"))) void quantize_avx512(const float* x, int64_t n, float scale,
                                                        int32_t zero_point, void* out) {
  const avx512::QuantizeConstants c = avx512::quantize_constants(scale, zero_point, Signed);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<char*>(out) + i),
                     avx512::quantize16(_mm512_loadu_ps(x + i), c));
  if (i < n) {
    if constexpr (Signed)
      quantize_loop(x + i, n - i, scale, zero_point, static_cast<int8_t*>(out) + i);
    else
      quantize_loop(x + i, n - i, scale, zero_point, static_cast<uint8_t*>(out) + i);
  }
}

}  // namespace

void quantize_span(const float* x, int64_t n, float scale, int32_t zero_point, uint8_t* y) {
  if (kAvx512) return quantize_avx512<false>(x, n, scale, zero_point, y);
  quantize_portable(x, n, scale, zero_point, y);
}
void quantize_span(const float* x, int64_t n, float scale, int32_t zero_point, int8_t* y) {
  if (kAvx512) return quantize_avx512<true>(x, n, scale, zero_point, y);
  quantize_portable(x, n, scale, zero_point, y);
}

int64_t saturate(double v, DType t) {
  const double r = std::nearbyint(v);
  double lo = 0, hi = 255;
  if (t == DType::Int8)
    lo = -128, hi = 127;
  else if (t == DType::Int32)
    lo = -2147483648.0, hi = 2147483647.0;
  else if (t == DType::UInt16)
    hi = 65535;
  else if (t == DType::Int16)
    lo = -32768, hi = 32767;
  if (std::isnan(r)) return 0;
  return static_cast<int64_t>(std::clamp(r, lo, hi));
}

void store_integer(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::UInt8:
      t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
      break;
    case DType::Int8:
      t.data<int8_t>()[i] = static_cast<int8_t>(v);
      break;
    case DType::Int32:
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::UInt16:
      t.data<uint16_t>()[i] = static_cast<uint16_t>(v);
      break;
    case DType::Int16:
      t.data<int16_t>()[i] = static_cast<int16_t>(v);
      break;
    default:
      fail(ErrorCode::NotImplemented,
           std::string("quantized type ") + dtype_name(t.dtype()) + " is not supported");
  }
}

Tensor integer_conv(const ConvShapes& s, const Tensor& x, int64_t x_zp, const Tensor& w,
                    const Tensor* w_zp) {
  Tensor xi = allocate_tensor(DType::Int32, x.shape()),
         wi = allocate_tensor(DType::Int32, w.shape());
  for (int64_t e = 0; e < x.numel(); ++e)
    xi.data<int32_t>()[e] = static_cast<int32_t>(value_at(x, e) - static_cast<double>(x_zp));
  const int64_t per_m = w.numel() / std::max<int64_t>(w.dim(0), 1);
  for (int64_t e = 0; e < w.numel(); ++e)
    wi.data<int32_t>()[e] = static_cast<int32_t>(
        value_at(w, e) - (w_zp ? value_at(*w_zp, w_zp->numel() > 1 ? e / per_m : 0) : 0));
  Tensor acc = allocate_tensor(DType::Int32, s.out);
  reference_conv<int32_t, int64_t>(s, xi.data<int32_t>(), wi.data<int32_t>(), nullptr,
                                   acc.data<int32_t>());
  return acc;
}

std::vector<int64_t> integer_matmul(const Tensor& a, const Tensor& b, const Tensor* azp,
                                    const Tensor* bzp, const MatMulShapes& s) {
  const MatMulBatches batches(s);
  const int64_t m = s.m, k = s.k, n = s.n;
  std::vector<int64_t> y(static_cast<size_t>(batches.count() * m * n), 0);
  for (int64_t bi = 0; bi < batches.count(); ++bi) {
    int64_t ia, ib;
    batches.operands(bi, ia, ib);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        const double za = azp ? value_at(*azp, azp->numel() > 1 ? i : 0) : 0,
                     zb = bzp ? value_at(*bzp, bzp->numel() > 1 ? j : 0) : 0;
        for (int64_t p = 0; p < k; ++p)
          acc += static_cast<int64_t>(value_at(a, (ia * m + i) * k + p) - za) *
                 static_cast<int64_t>(value_at(b, (ib * k + p) * n + j) - zb);
        y[static_cast<size_t>((bi * m + i) * n + j)] = acc;
      }
  }
  return y;
}

void check_scales(const Tensor& scales, const Node& node, const char* what) {
  const DType t = scales.dtype();
  if (t != DType::Float && t != DType::Float16 && t != DType::BFloat16 && t != DType::Double)
    fail(ErrorCode::InvalidModel, node.describe() + ": " + what +
                                      " scale must be a float tensor, got " +
                                      dtype_name(scales.dtype()));
  for (int64_t i = 0; i < scales.numel(); ++i) {
    const double v = value_at(scales, i);
    if (v > 0 && std::isfinite(v)) continue;
    std::string where = std::string(what) + " scale";
    if (scales.numel() > 1) where += " [" + std::to_string(i) + "]";
    fail(ErrorCode::InvalidModel, node.describe() + ": " + where + " is " + std::to_string(v) +
                                      "; scales must be positive and finite");
  }
}

DynamicRange dynamic_range(const float* x, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<MinMax> parts(static_cast<size_t>(chunks));
  parallel_for(chunks, n > (1 << 16), [&](int64_t c) {
    parts[static_cast<size_t>(c)] =
        min_max_with_zero(x + c * kChunk, std::min(kChunk, n - c * kChunk));
  });
  float mn = 0, mx = 0;
  for (const MinMax& m : parts) {
    mn = std::min(mn, m.lo);
    mx = std::max(mx, m.hi);
  }
  DynamicRange r;
  // In double, as the reference computes it (min and max are exact either way).
  r.scale = static_cast<float>((static_cast<double>(mx) - mn) / 255.0);
  r.zero_point =
      r.scale == 0
          ? 0
          : static_cast<int32_t>(saturate(-mn / static_cast<double>(r.scale), DType::UInt8));
  return r;
}

void dynamic_quantize(const float* x, int64_t n, const DynamicRange& r, uint8_t* y) {
  if (r.scale == 0) {
    std::fill(y, y + n, static_cast<uint8_t>(r.zero_point));
    return;
  }
  parallel_chunks(n, kChunk, [&](int64_t lo, int64_t hi) {
    quantize_span(x + lo, hi - lo, r.scale, r.zero_point, y + lo);
  });
}

}  // namespace volt
