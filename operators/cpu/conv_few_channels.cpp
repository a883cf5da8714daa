#include "operators/cpu/conv_few_channels.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/cpu/conv_winograd.hpp"  // ChannelGroups
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// Output channels computed together: M is padded to a multiple of 16 (8 where it is 8).
constexpr int64_t kColumns = 16;

// Where X's value (c, iy, ix) lies in a stored image: channel[c] + iy row + ix column; and each
// tap's place in the staged X rows (see row_in_blocks). The same for every output row of a run.
struct RowGeometry {
  int64_t row = 0, column = 0, row_length = 0;
  int64_t channel[FewChannelConv::kMaxTaps];  // (c <= taps)
  int64_t tap[FewChannelConv::kMaxTaps];
};

RowGeometry row_geometry(const FewChannelConv& p, int64_t row_length) {
  RowGeometry r;
  const int64_t b = block_channels(p.x_layout);
  const bool first = p.x_layout == StoredLayout::ChannelsFirst;
  r.row = first ? p.w : p.w * (b ? b : p.c);
  r.column = first ? 1 : (b ? b : p.c);
  r.row_length = row_length;
  for (int64_t c = 0; c < p.c; ++c)
    r.channel[c] = first ? c * p.h * p.w : (b ? c / b * p.h * p.w * b + c % b : c);
  for (int64_t c = 0, t = 0; c < p.c; ++c)
    for (int64_t i = 0; i < p.kh; ++i)
      for (int64_t j = 0; j < p.kw; ++j, ++t)
        r.tap[t] = (c * p.kh + i) * row_length + j * p.dilation_x;
  return r;
}

// acc[q] += (X value of tap t for pixel q) x (the tap's weights), over the taps, the pixels
// kStride apart in the staged rows (0: p.stride_x apart; 1 and 2 give fixed distances from one
// address).
template <int kStride, int kPix, class V>
__attribute__((always_inline)) inline void accumulate(const FewChannelConv& p, const RowGeometry& r,
                                                      const float* first, const float* weights,
                                                      V* acc) {
  const int64_t stride = kStride ? kStride : p.stride_x;
  for (int64_t t = 0; t < p.taps; ++t) {
    V w;
    __builtin_memcpy(&w, weights + t * p.m_padded, sizeof w);
    const float* at = first + r.tap[t];
    for (int q = 0; q < kPix; ++q) acc[q] += at[q * stride] * w;
  }
}

// Stores the blocks of `kCols` channels (from channel `first`) of `pixels` consecutive output
// pixels from `pixel` on, where Y keeps them: groups of 8 channels (one store where two groups
// lie side by side: blocks of 16, channels-last), one pixel's a pixel stride after the last's,
// nothing past M.
template <int kCols, int kPix, class V>
__attribute__((always_inline)) inline void store_columns(const FewChannelConv& p,
                                                         const ChannelGroups& y_at, V* acc,
                                                         int64_t pixels, int64_t first,
                                                         int64_t pixel, float* y) {
  const int64_t step = y_at.pixel_stride;
  float* lo = y + y_at.at(first / 8, pixel);
  const bool whole =
      first + kCols <= p.m && (kCols == 8 || y + y_at.at(first / 8 + 1, pixel) == lo + 8);
  using Kind = FusedActivation::Kind;
  const Kind kind = p.act.kind;
  const float alpha = p.act.alpha, beta = p.act.beta;
  for (int64_t q = 0; q < pixels; ++q) {
    V v = acc[q];
    // (As FusedActivation::apply: NaN stays NaN.)
    if (kind == Kind::Relu) v = v < 0.0f ? V{} : v;
    if (kind == Kind::LeakyRelu) v = v < 0.0f ? v * alpha : v;
    if (kind == Kind::Clip) {
      v = v < alpha ? V{} + alpha : v;
      v = v > beta ? V{} + beta : v;
    }
    if (whole) {
      __builtin_memcpy(lo + q * step, &v, sizeof v);
      continue;
    }
    for (int64_t half = 0; half < kCols && first + half < p.m; half += 8) {
      float* out = y + y_at.at((first + half) / 8, pixel + q);
      for (int64_t l = 0; l < 8; ++l) out[l] = v[half + l];
    }
  }
}

// Output row `oy` of one image, kPix outputs at a time: each block of kCols output channels as
// kPix vectors of sums, each tap's weights loaded once for all of them and its X values broadcast
// from `rows`: the X rows this output row reads, each channel's and kernel row's in turn, from
// the left pad on, with zeros where the window reaches past X (so that no block checks bounds).
template <int kCols, int kPix>
__attribute__((always_inline)) inline void row_in_blocks(const FewChannelConv& p,
                                                         const RowGeometry& r, const float* x,
                                                         int64_t oy, const float* bias,
                                                         const ChannelGroups& y_at, float* rows,
                                                         int64_t first_pixel, float* y) {
  typedef float V __attribute__((vector_size(kCols * sizeof(float))));
  const float* wt = p.weights->data<float>();
  const int64_t iy0 = oy * p.stride_y - p.pad_top;
  for (int64_t c = 0; c < p.c; ++c)
    for (int64_t i = 0; i < p.kh; ++i) {
      float* row = rows + (c * p.kh + i) * r.row_length;
      const int64_t iy = iy0 + i * p.dilation_y;
      std::fill_n(row, r.row_length, 0.0f);
      if (iy < 0 || iy >= p.h) continue;
      const float* from = x + r.channel[c] + iy * r.row;
      const int64_t first = std::max<int64_t>(0, p.pad_left),
                    last = std::min<int64_t>(r.row_length, p.pad_left + p.w);
      if (r.column == 1)  // (channels-first X: its row as it lies)
        std::copy(from + (first - p.pad_left), from + (last - p.pad_left), row + first);
      else
        for (int64_t k = first; k < last; ++k) row[k] = from[(k - p.pad_left) * r.column];
    }
  for (int64_t ox0 = 0; ox0 < p.ow; ox0 += kPix) {
    const int64_t pixels = std::min<int64_t>(kPix, p.ow - ox0);
    const float* first = rows + ox0 * p.stride_x;
    for (int64_t mb = 0; mb < p.m_padded; mb += kCols) {
      V b;
      __builtin_memcpy(&b, bias + mb, sizeof b);
      V acc[kPix];
      for (int q = 0; q < kPix; ++q) acc[q] = b;
      if (p.stride_x == 1)
        accumulate<1, kPix>(p, r, first, wt + mb, acc);
      else if (p.stride_x == 2)
        accumulate<2, kPix>(p, r, first, wt + mb, acc);
      else
        accumulate<0, kPix>(p, r, first, wt + mb, acc);
      store_columns<kCols, kPix>(p, y_at, acc, pixels, mb, first_pixel + ox0, y);
    }
  }
}

// Output pixels a block computes (see few_channel_row).
int64_t block_pixels(const FewChannelConv& p) {
  static const bool wide_register_file = cpu_has_avx512f();
  return !wide_register_file ? 12 : (p.m_padded == 8 ? 16 : 8);
}

// With AVX-512's 32 vector registers, the rows in blocks of 16 output channels (8 pixels at a
// time) or, where M is 8, of 8 (16 pixels at a time): the accumulators of both fill the
// registers alike. With AVX2's 16, which must also hold the tap's weights and the broadcast X
// value, in blocks of 8 channels, 12 pixels at a time: 16 accumulators would spill to the stack,
// and GCC lowers 16-float vectors to stack traffic there (MNASNet's 3 -> 32 stride-2 stem at batch
// 1: 2.2-2.4 ms against 0.47-0.51 in blocks of 8, oneDNN's 0.37-0.56). Compiled for x86-64-v4
// (AVX-512), -v3 (AVX2 with FMA) and the baseline, rather than VOLT_SIMD_CLONES's avx512f and avx2:
// GCC's avx512f alone gives 8-float vectors neither fused multiply-adds nor registers 16-31, and
// this loop holds 16 of them (2.6x slower for a 1 -> 8 stem).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VOLT_FEW_CHANNEL_CLONES
#else
#define VOLT_FEW_CHANNEL_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
// Output row `oy`, its first pixel stored as pixel `first_pixel` of `y` (oy ow in Y; 0 in a
// buffer of rows for the max pool).
VOLT_FEW_CHANNEL_CLONES void few_channel_row(const FewChannelConv& p, const RowGeometry& r,
                                             const float* x, int64_t oy, const float* bias,
                                             const ChannelGroups& y_at, float* rows,
                                             int64_t first_pixel, float* y) {
  const int64_t pixels = block_pixels(p);
  if (pixels == 16)
    row_in_blocks<8, 16>(p, r, x, oy, bias, y_at, rows, first_pixel, y);
  else if (pixels == 12)
    row_in_blocks<8, 12>(p, r, x, oy, bias, y_at, rows, first_pixel, y);
  else
    row_in_blocks<16, 8>(p, r, x, oy, bias, y_at, rows, first_pixel, y);
}

// Pooled row `py` of one image from the pool_kh convolution rows it reads, `conv_rows` (stored
// channels-last, M floats a pixel, ow pixels a row): each window's maximum, 8 channels at a time,
// into Y as it is stored; kPix windows side by side, so that their chains of comparisons overlap
// (one window at a time, the pool took longer than the separate MaxPool node it replaces). A NaN
// is passed over, as MaxPool's comparison does.
template <int kPix>
__attribute__((always_inline)) inline void max_pool_pixels(const FewChannelConv& p,
                                                           const float* conv_rows, int64_t px,
                                                           int64_t pixels, int64_t g,
                                                           const ChannelGroups& y_at,
                                                           int64_t first_out, float* y) {
  typedef float V __attribute__((vector_size(8 * sizeof(float))));
  V top[kPix];
  for (int q = 0; q < kPix; ++q) top[q] = V{} - std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < p.pool_kh; ++i)
    for (int64_t j = 0; j < p.pool_kw; ++j) {
      const float* at = conv_rows + (i * p.ow + px * p.pool_kw + j) * p.m + g * 8;
      for (int q = 0; q < kPix; ++q) {
        if (q >= pixels) break;
        V v;
        __builtin_memcpy(&v, at + q * p.pool_kw * p.m, sizeof v);
        top[q] = v > top[q] ? v : top[q];
      }
    }
  for (int q = 0; q < kPix && q < pixels; ++q)
    __builtin_memcpy(y + y_at.at(g, first_out + px + q), &top[q], sizeof top[q]);
}
VOLT_FEW_CHANNEL_CLONES void max_pool_row(const FewChannelConv& p, const float* conv_rows,
                                          int64_t py, const ChannelGroups& y_at, float* y) {
  constexpr int kPix = 4;
  for (int64_t g = 0; g < p.m / 8; ++g)
    for (int64_t px = 0; px < p.pool_w; px += kPix)
      max_pool_pixels<kPix>(p, conv_rows, px, std::min<int64_t>(kPix, p.pool_w - px), g, y_at,
                            py * p.pool_w, y);
}

}  // namespace

std::shared_ptr<const FewChannelConv> plan_few_channel_conv(
    InferContext& ctx, const ConvShapes& s, const Tensor& w, const FusedActivation& act,
    StoredLayout x_layout, StoredLayout y_layout, bool only_if_planned, int64_t pool_kh,
    int64_t pool_kw) {
  const WindowGeometry& g = s.win;
  if (g.in.size() != 2 || s.group != 1 || w.dtype() != DType::Float || s.m % 8 != 0 ||
      y_layout == StoredLayout::ChannelsFirst)
    return nullptr;
  const int64_t taps = s.c * g.kernel[0] * g.kernel[1];
  // (A window over few planes, what the loop was measured on; a 1x1 convolution is a matrix
  // product, oneDNN's.)
  if (taps > FewChannelConv::kMaxTaps || g.kernel[0] * g.kernel[1] == 1) return nullptr;
  // (The activations a vector select computes; the others are oneDNN's post-ops.)
  using Kind = FusedActivation::Kind;
  if (act.kind != Kind::None && act.kind != Kind::Relu && act.kind != Kind::LeakyRelu &&
      act.kind != Kind::Clip)
    return nullptr;
  // (Blocked X: whole blocks of channels, as the layout passes store them.)
  if (block_channels(x_layout) && s.c % block_channels(x_layout) != 0) return nullptr;
  auto p = std::make_shared<FewChannelConv>(s);
  if (pool_kh > 0) {
    p->pool_kh = pool_kh;
    p->pool_kw = pool_kw;
    p->pool_h = p->oh / pool_kh;
    p->pool_w = p->ow / pool_kw;
  }
  p->m_padded = s.m == 8 ? 8 : (s.m + kColumns - 1) / kColumns * kColumns;
  p->taps = taps;
  p->x_layout = x_layout;
  p->y_layout = y_layout;
  p->act = act;
  // The weights as [taps][M'], once per session: every plan of this node shares them.
  std::string key = "few channel weights";
  const uintptr_t at = reinterpret_cast<uintptr_t>(w.raw());
  key.append(reinterpret_cast<const char*>(&at), sizeof at);
  if (NodeMemo* memo = ctx.memo())
    p->weights = std::static_pointer_cast<const Tensor>(memo->find(key));
  if (!p->weights && only_if_planned) return nullptr;
  if (!p->weights) {
    auto laid = std::make_shared<Tensor>(allocate_tensor(DType::Float, {taps, p->m_padded}));
    float* out = laid->data<float>();
    std::fill_n(out, laid->numel(), 0.0f);
    const float* src = w.data<float>();  // [M][C][kh][kw]: tap t is the inner index
    for (int64_t m = 0; m < s.m; ++m)
      for (int64_t t = 0; t < taps; ++t) out[t * p->m_padded + m] = src[m * taps + t];
    p->weights = laid;
    if (NodeMemo* memo = ctx.memo()) memo->keep(key, laid);
  }
  return p;
}

void run_few_channel_conv(const FewChannelConv& p, const float* x, const float* bias, float* y) {
  // (Buffers kept by each thread: no allocation per run once they are as large as needed.)
  thread_local std::vector<float> bias_buffer;
  bias_buffer.assign(static_cast<size_t>(p.m_padded), 0.0f);
  if (bias) std::copy_n(bias, p.m, bias_buffer.begin());
  // (This thread's: a thread_local named inside the parallel body is each worker's own.)
  const float* padded_bias = bias_buffer.data();
  const bool pooled = p.pool_kh > 0;
  const int64_t out_h = pooled ? p.pool_h : p.oh, out_w = pooled ? p.pool_w : p.ow;
  const ChannelGroups y_at(p.y_layout, p.m, out_h * out_w, 8);
  // (The convolution rows a pooled row reads: channels-last, M floats a pixel.)
  const ChannelGroups rows_at(StoredLayout::ChannelsLast, p.m, p.pool_kh * p.ow, 8);
  const int64_t x_image = p.c * p.h * p.w, y_image = p.m * out_h * out_w;
  // A row of `rows` spans every block's window from the left pad on (the last block's pixels
  // past the output read zeros there).
  const int64_t blocks_width = (p.ow + block_pixels(p) - 1) / block_pixels(p) * block_pixels(p);
  const int64_t row_length = (blocks_width - 1) * p.stride_x + (p.kw - 1) * p.dilation_x + 1;
  const RowGeometry geometry = row_geometry(p, row_length);
  const int64_t rows = p.n * out_h;
  const size_t buffer = static_cast<size_t>(p.c * p.kh * row_length);
  const size_t pool_buffer = static_cast<size_t>(p.pool_kh * p.ow * p.m);
  // Rows in up to 16 chunks (several per thread, evening out the edges' cost), each with its
  // buffer for the X rows.
  const bool parallel = rows * p.ow * p.m_padded * p.taps > (int64_t{1} << 16);
  const int64_t grain = parallel ? std::max<int64_t>(1, (rows + 15) / 16) : rows;
  parallel_chunks(rows, grain, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> x_rows, conv_rows;
    if (x_rows.size() < buffer) x_rows.resize(buffer);
    if (conv_rows.size() < pool_buffer) conv_rows.resize(pool_buffer);
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t image = r / out_h, oy = r % out_h;
      if (!pooled) {
        few_channel_row(p, geometry, x + image * x_image, oy, padded_bias, y_at, x_rows.data(),
                        oy * p.ow, y + image * y_image);
        continue;
      }
      for (int64_t i = 0; i < p.pool_kh; ++i)
        few_channel_row(p, geometry, x + image * x_image, oy * p.pool_kh + i, padded_bias, rows_at,
                        x_rows.data(), i * p.ow, conv_rows.data());
      max_pool_row(p, conv_rows.data(), oy, y_at, y + image * y_image);
    }
  });
}

}  // namespace volt
