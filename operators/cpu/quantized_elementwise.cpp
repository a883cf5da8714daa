// QuantizedAdd and QuantizedUnary (ai.volt): the float ops that static (QDQ) quantization leaves
// between quantized layers, on 8-bit values in one pass (lower_quantized.cpp writes them):
//
//   QuantizedAdd:   DequantizeLinear(A), DequantizeLinear(B) -> Add [-> activation] ->
//   QuantizeLinear QuantizedUnary: DequantizeLinear(X) [-> activation] -> QuantizeLinear      (a
//   256-entry table)
//
// They compute what the unfused nodes compute, with the same float operations in the same order
// (dequantize: (q - zero point) · scale; add; the activation; quantize: round(v / scale) + zero
// point, saturated), so the answer is the same to the bit, in a quarter of the memory traffic.
// Attributes: volt.scales and volt.zero_points (A's, B's, Y's; X's, Y's), volt.output_type, the
// fused activation.
#include "operators/common/cpu_isa.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/cpu/quantization.hpp"
#include "operators/cpu/quantize_avx512.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

struct QuantizedParams {
  std::vector<float> scales;
  std::vector<int64_t> zero_points;
  DType out;
  FusedActivation act;

  QuantizedParams(const Node& n, size_t operands, const std::string& prefix = "volt.")
      : scales(n.attr_floats(prefix + "scales")),
        zero_points(n.attr_ints(prefix + "zero_points")),
        out(static_cast<DType>(
            n.attr_int(prefix + "output_type", static_cast<int64_t>(DType::UInt8)))),
        act(FusedActivation::of(n, prefix)) {
    VOLT_CHECK(scales.size() == operands && zero_points.size() == operands, InvalidModel,
               n.describe() + ": needs " + std::to_string(operands) + " scales and zero points");
    VOLT_CHECK(out == DType::UInt8 || out == DType::Int8, InvalidModel,
               n.describe() + ": volt.output_type must be uint8 or int8");
    for (float s : scales)
      VOLT_CHECK(s > 0 && std::isfinite(s), InvalidModel,
                 n.describe() + ": scales must be positive and finite");
  }
  float lo() const { return out == DType::Int8 ? -128.0f : 0.0f; }
  float hi() const { return out == DType::Int8 ? 127.0f : 255.0f; }
  // One output element from its float value.
  int32_t quantize(float v) const {
    return static_cast<int32_t>(quantize_value(act.apply(v), scales.back(),
                                               static_cast<float>(zero_points.back()), lo(), hi()));
  }
};

bool is_8bit(DType t) {
  return t == DType::UInt8 || t == DType::Int8;
}

// Calls f with a pointer of x's 8-bit type.
template <class F>
void with_8bit(const Tensor& x, F&& f) {
  if (x.dtype() == DType::Int8)
    f(x.data<int8_t>());
  else
    f(x.data<uint8_t>());
}
template <class F>
void with_8bit_out(Tensor& y, F&& f) {
  if (y.dtype() == DType::Int8)
    f(y.data<int8_t>());
  else
    f(y.data<uint8_t>());
}

// The 256 outputs of DequantizeLinear -> activation -> QuantizeLinear for every 8-bit input (its
// raw byte, an int8 offset by 128 so that the table reads it as an index).
std::array<uint8_t, 256> lookup_table(const QuantizedParams& p, bool signed_in) {
  std::array<uint8_t, 256> t{};
  for (int32_t q = 0; q < 256; ++q) {
    const int32_t v = signed_in ? q - 128 : q;
    const int32_t r =
        p.quantize(static_cast<float>(v - static_cast<int32_t>(p.zero_points[0])) * p.scales[0]);
    t[static_cast<size_t>(q)] = static_cast<uint8_t>(r & 0xff);  // int8 kept as its bits
  }
  return t;
}

// y[i] = table[x[i]] over raw bytes (`flip`: 0x80 for int8 input, which indexes by value + 128).
inline void look_up(const uint8_t* x, int64_t n, const std::array<uint8_t, 256>& table,
                    uint8_t flip, uint8_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = table[static_cast<uint8_t>(x[i] ^ flip)];
}

constexpr int64_t kBlock = 2048;  // elements per piece: the float values stay in L1

// GCC 12's AVX-512 conversion builtins take an "undefined" vector that -Wmaybe-uninitialized
// flags in its own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// look_up 64 bytes at a time (AVX-512 VBMI: a 256-entry table is four registers).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void look_up_vbmi(
    const uint8_t* x, int64_t n, const std::array<uint8_t, 256>& table, uint8_t flip, uint8_t* y) {
  const avx512::ByteTable t = avx512::load_table(table);
  const __m512i f = _mm512_set1_epi8(static_cast<char>(flip));
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    _mm512_storeu_si512(y + i,
                        avx512::look_up64(_mm512_xor_si512(_mm512_loadu_si512(x + i), f), t));
  look_up(x + i, n - i, table, flip, y + i);
}

// What QuantizedAdd's same-shape loop computes, in registers: the operands' dequantization, the
// sum, a Relu if any, the quantization and the second stage's table, 64 elements at a time.
struct FusedAdd {
  int32_t za, zb;
  float sa, sb;
  bool relu;
  float y_scale;
  int32_t y_zero_point;
  bool y_signed;
  const std::array<uint8_t, 256>* then_table;  // null: no second stage
  uint8_t then_flip;
};

template <bool SignedA, bool SignedB>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline __m128i fused_sum16(
    const uint8_t* a, const uint8_t* b, const FusedAdd& f, const avx512::QuantizeConstants& out) {
  const __m128i qa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i qb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m512i ia = SignedA ? _mm512_cvtepi8_epi32(qa) : _mm512_cvtepu8_epi32(qa);
  const __m512i ib = SignedB ? _mm512_cvtepi8_epi32(qb) : _mm512_cvtepu8_epi32(qb);
  // (q - zero point) · scale in float for each, then their sum: dequantize_span's operations.
  const __m512 fa = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ia, _mm512_set1_epi32(f.za))),
                                  _mm512_set1_ps(f.sa));
  const __m512 fb = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ib, _mm512_set1_epi32(f.zb))),
                                  _mm512_set1_ps(f.sb));
  __m512 v = _mm512_add_ps(fa, fb);
  if (f.relu) {  // v < 0 ? 0 : v, as activate() has it (-0 stays -0)
    const __m512 zero = _mm512_setzero_ps();
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
  }
  return avx512::quantize16(v, out);
}

// The first n - n % 64 elements; returns how many it did.
template <bool SignedA, bool SignedB>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) int64_t fused_add_vbmi(
    const uint8_t* a, const uint8_t* b, int64_t n, const FusedAdd& f, uint8_t* y) {
  const avx512::QuantizeConstants out =
      avx512::quantize_constants(f.y_scale, f.y_zero_point, f.y_signed);
  avx512::ByteTable t{};
  if (f.then_table) t = avx512::load_table(*f.then_table);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(f.then_flip));
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512i q = _mm512_castsi128_si512(fused_sum16<SignedA, SignedB>(a + i, b + i, f, out));
    q = _mm512_inserti32x4(q, (fused_sum16<SignedA, SignedB>(a + i + 16, b + i + 16, f, out)), 1);
    q = _mm512_inserti32x4(q, (fused_sum16<SignedA, SignedB>(a + i + 32, b + i + 32, f, out)), 2);
    q = _mm512_inserti32x4(q, (fused_sum16<SignedA, SignedB>(a + i + 48, b + i + 48, f, out)), 3);
    if (f.then_table) q = avx512::look_up64(_mm512_xor_si512(q, flip), t);
    _mm512_storeu_si512(y + i, q);
  }
  return i;
}

#pragma GCC diagnostic pop

void activate(const FusedActivation& act, float* v, int64_t n) {
  if (act.kind == FusedActivation::Kind::Relu) {
    for (int64_t i = 0; i < n; ++i) v[i] = v[i] < 0.0f ? 0.0f : v[i];
  } else if (act.any()) {
    for (int64_t i = 0; i < n; ++i) v[i] = act.apply(v[i]);
  }
}

// DequantizeLinear -> activation -> QuantizeLinear on 8-bit values, for QuantizedUnary and the
// second stage of QuantizedAdd. With no activation or a Relu (ResNet's) it is computed: the
// dequantize and quantize loops are vectorized and a byte table is not (the table took 75% of a
// QDQ residual Add). Other activations (costly per element) are a 256-entry table.
class Requantizer {
 public:
  Requantizer(const Node& n, const std::string& prefix, bool signed_in)
      : p_(n, 2, prefix), signed_in_(signed_in), table_(lookup_table(p_, signed_in)) {}
  DType out() const { return p_.out; }
  // y[0, n) (raw bytes of out()) from x[0, n) (raw bytes of the input type); n <= kBlock.
  void operator()(const uint8_t* x, int64_t n, void* y) const {
    if (cpu_has_avx512_vbmi()) return look_up_vbmi(x, n, table_, flip(), static_cast<uint8_t*>(y));
    if (p_.act.kind != FusedActivation::Kind::Relu && p_.act.any())
      return look_up(x, n, table_, flip(), static_cast<uint8_t*>(y));
    float v[kBlock];
    const int32_t z0 = static_cast<int32_t>(p_.zero_points[0]),
                  z1 = static_cast<int32_t>(p_.zero_points[1]);
    if (signed_in_)
      dequantize_span(reinterpret_cast<const int8_t*>(x), n, z0, p_.scales[0], v);
    else
      dequantize_span(x, n, z0, p_.scales[0], v);
    activate(p_.act, v, n);
    if (p_.out == DType::Int8)
      quantize_span(v, n, p_.scales[1], z1, static_cast<int8_t*>(y));
    else
      quantize_span(v, n, p_.scales[1], z1, static_cast<uint8_t*>(y));
  }

  // The 256 results by raw input byte, and what the byte is xor-ed with to index them.
  const std::array<uint8_t, 256>& table() const { return table_; }
  uint8_t flip() const { return signed_in_ ? 0x80 : 0; }

 private:
  QuantizedParams p_;
  bool signed_in_;
  std::array<uint8_t, 256> table_{};
};

class QuantizedAdd final : public Kernel {
 public:
  // volt.then_*: a DequantizeLinear -> activation -> QuantizeLinear after the sum (the pass
  // folded a QuantizedUnary in), as a table on its 8-bit result.
  explicit QuantizedAdd(const Node& n) : p_(n, 3) {
    if (n.has_attr("volt.then_scales"))
      then_ = std::make_unique<Requantizer>(n, "volt.then_", p_.out == DType::Int8);
  }
  void infer(InferContext& ctx) const override {
    if (!is_8bit(ctx.dtype(0)) || !is_8bit(ctx.dtype(1)))
      ctx.error("A and B must be uint8 or int8");
    ctx.set_output(0, then_ ? then_->out() : p_.out,
                   broadcast_shapes({ctx.shape(0), ctx.shape(1)}, ctx.node()));
  }
  void run(RunContext& ctx) const override {
    const Tensor &a = ctx.input(0), &b = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (a.shape() == b.shape()) {
      const bool fused =
          cpu_has_avx512_vbmi() && (!p_.act.any() || p_.act.kind == FusedActivation::Kind::Relu);
      parallel_chunks(y.numel(), kBlock, [&](int64_t lo, int64_t hi) {
        if (fused) lo += fused_add(a, b, lo, hi, y);
        if (lo == hi) return;
        float va[kBlock], vb[kBlock];
        const int64_t n = hi - lo;
        with_8bit(a, [&](auto pa) { dequantize_span(pa + lo, n, zp(0), p_.scales[0], va); });
        with_8bit(b, [&](auto pb) { dequantize_span(pb + lo, n, zp(1), p_.scales[1], vb); });
        for (int64_t i = 0; i < n; ++i) va[i] += vb[i];
        finish(va, n, y, lo);
      });
      return;
    }
    // B (or A) broadcast: the same arithmetic element by element.
    const BroadcastIterator it(y.shape(),
                               {strides_of(y.shape()), broadcast_strides(a.shape(), y.shape()),
                                broadcast_strides(b.shape(), y.shape())});
    it.for_each_row([&](const int64_t* off, int64_t n, const int64_t* step) {
      for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
        float va[kBlock];
        const int64_t m = std::min(kBlock, n - i0);
        for (int64_t i = 0; i < m; ++i) {
          const int64_t k = i0 + i;
          const float x =
              static_cast<float>(static_cast<int32_t>(value8(a, off[1] + k * step[1])) - zp(0)) *
              p_.scales[0];
          const float w =
              static_cast<float>(static_cast<int32_t>(value8(b, off[2] + k * step[2])) - zp(1)) *
              p_.scales[1];
          va[i] = x + w;
        }
        // The output row is contiguous (its stride along the innermost axis is 1).
        finish(va, m, y, off[0] + i0 * step[0]);
      }
    });
  }

 private:
  int32_t zp(size_t i) const { return static_cast<int32_t>(p_.zero_points[i]); }
  // The fused AVX-512 VBMI loop on [lo, hi) of same-shape operands; the elements it did.
  int64_t fused_add(const Tensor& a, const Tensor& b, int64_t lo, int64_t hi, Tensor& y) const {
    const FusedAdd f{zp(0),
                     zp(1),
                     p_.scales[0],
                     p_.scales[1],
                     p_.act.kind == FusedActivation::Kind::Relu,
                     p_.scales[2],
                     zp(2),
                     p_.out == DType::Int8,
                     then_ ? &then_->table() : nullptr,
                     then_ ? then_->flip() : uint8_t{0}};
    const auto* pa = static_cast<const uint8_t*>(a.raw()) + lo;
    const auto* pb = static_cast<const uint8_t*>(b.raw()) + lo;
    auto* py = static_cast<uint8_t*>(y.raw()) + lo;
    const bool sa = a.dtype() == DType::Int8, sb = b.dtype() == DType::Int8;
    if (sa && sb) return fused_add_vbmi<true, true>(pa, pb, hi - lo, f, py);
    if (sa) return fused_add_vbmi<true, false>(pa, pb, hi - lo, f, py);
    if (sb) return fused_add_vbmi<false, true>(pa, pb, hi - lo, f, py);
    return fused_add_vbmi<false, false>(pa, pb, hi - lo, f, py);
  }
  static int32_t value8(const Tensor& t, int64_t i) {
    return t.dtype() == DType::Int8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
  }
  // The activation, then QuantizeLinear's arithmetic, into y[at, at + n); then the second stage.
  void finish(float* v, int64_t n, Tensor& y, int64_t at) const {
    activate(p_.act, v, n);
    const float ys = p_.scales[2];
    const int32_t yz = zp(2);
    if (!then_) return with_8bit_out(y, [&](auto py) { quantize_span(v, n, ys, yz, py + at); });
    alignas(64) uint8_t sum[kBlock];
    if (p_.out == DType::Int8)
      quantize_span(v, n, ys, yz, reinterpret_cast<int8_t*>(sum));
    else
      quantize_span(v, n, ys, yz, sum);
    (*then_)(sum, n, static_cast<uint8_t*>(y.raw()) + at);
  }

  QuantizedParams p_;
  std::unique_ptr<Requantizer> then_;
};

class QuantizedUnary final : public Kernel {
 public:
  explicit QuantizedUnary(const Node& n)
      : signed_in_(n.attr_int("volt.input_type", 2) == 3), stage_(n, "volt.", signed_in_) {}
  void infer(InferContext& ctx) const override {
    if (ctx.dtype(0) != (signed_in_ ? DType::Int8 : DType::UInt8))
      ctx.error("X must have the type volt.input_type says");
    ctx.set_output(0, stage_.out(), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const uint8_t* x = static_cast<const uint8_t*>(ctx.input(0).raw());
    uint8_t* y = static_cast<uint8_t*>(ctx.output(0).raw());
    parallel_chunks(ctx.input(0).numel(), kBlock,
                    [&](int64_t lo, int64_t hi) { stage_(x + lo, hi - lo, y + lo); });
  }

 private:
  bool signed_in_;
  Requantizer stage_;
};

}  // namespace

VOLT_REGISTER_KERNEL(quantized_add, volt_kernel("QuantizedAdd", make_kernel<QuantizedAdd>));
VOLT_REGISTER_KERNEL(quantized_unary, volt_kernel("QuantizedUnary", make_kernel<QuantizedUnary>));

}  // namespace volt
