#include "operators/cpu/conv_few_channels.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/cpu/conv_winograd.hpp"  // ChannelGroups
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

constexpr int64_t kPixels = 8;    // outputs of a row computed together
constexpr int64_t kColumns = 16;  // output channels computed together (M padded to them)

// Where X's value (c, iy, ix) lies in a stored image: channel_offset(c) + iy row + ix column.
struct XStrides {
  StoredLayout layout = StoredLayout::ChannelsFirst;
  int64_t h = 0, w = 0, row = 0, column = 0;
  int64_t channel_offset(int64_t c) const {
    const int64_t b = block_channels(layout);
    if (layout == StoredLayout::ChannelsFirst) return c * h * w;
    if (layout == StoredLayout::ChannelsLast) return c;
    return c / b * h * w * b + c % b;
  }
};

XStrides x_strides(StoredLayout layout, int64_t c, int64_t h, int64_t w) {
  const int64_t b = block_channels(layout);
  if (layout == StoredLayout::ChannelsFirst) return {layout, h, w, w, 1};
  if (layout == StoredLayout::ChannelsLast) return {layout, h, w, w * c, c};
  return {layout, h, w, w * b, b};
}

// Per tap: its offset in X from the patch's corner, and its distance in rows and columns.
struct Taps {
  int64_t offset[FewChannelConv::kMaxTaps];
  int64_t dy[FewChannelConv::kMaxTaps], dx[FewChannelConv::kMaxTaps];
};

// kColumns floats (GCC's vector arithmetic: one AVX-512 register, two AVX2 ones).
typedef float Columns __attribute__((vector_size(kColumns * sizeof(float))));

// Stores one output pixel's block of kColumns channels (from channel `first`) where Y keeps
// them: groups of 8 channels, one store where the two groups lie side by side (blocks of 16,
// channels-last), and nothing past M.
inline void store_columns(const FewChannelConv& p, const ChannelGroups& y_at, Columns v,
                          int64_t first, int64_t pixel, bool relu, float* y) {
  if (relu) v = v < 0.0f ? Columns{} : v;  // (NaN stays NaN, as ONNX's Relu)
  if (!relu && p.act.any())
    for (int64_t l = 0; l < kColumns; ++l) v[l] = p.act.apply(v[l]);
  const int64_t lo = y_at.at(first / 8, pixel);
  if (first + kColumns <= p.m && y_at.at(first / 8 + 1, pixel) == lo + 8) {
    __builtin_memcpy(y + lo, &v, sizeof v);
    return;
  }
  for (int64_t half = 0; half < kColumns && first + half < p.m; half += 8) {
    float* out = y + y_at.at((first + half) / 8, pixel);
    for (int64_t l = 0; l < 8; ++l) out[l] = v[half + l];
  }
}

// Output row `oy` of one image, kPixels outputs at a time: each block of kColumns output
// channels as kPixels vectors of sums, each tap's weights loaded once for all of them and its X
// values broadcast from where they lie (from a patch of zeros and values where the window
// reaches past X). (Compiled for AVX-512, AVX2 and the baseline.)
VOLT_SIMD_CLONES void few_channel_row(const FewChannelConv& p, const Taps& taps, int64_t x_row,
                                      int64_t x_column, const float* x, int64_t oy,
                                      const float* bias, const ChannelGroups& y_at, float* y) {
  const int64_t t_count = p.taps, mp = p.m_padded;
  const float* wt = p.weights->data<float>();
  const int64_t iy0 = oy * p.stride_y - p.pad_top;
  // Whether every tap's row lies inside X: then only the columns are checked, at the edges.
  const bool rows_inside = iy0 >= 0 && iy0 + (p.kh - 1) * p.dilation_y < p.h;
  const bool relu = p.act.kind == FusedActivation::Kind::Relu;
  float patch[kPixels][FewChannelConv::kMaxTaps];
  for (int64_t ox0 = 0; ox0 < p.ow; ox0 += kPixels) {
    const int64_t pixels = std::min(kPixels, p.ow - ox0);
    const int64_t first_ix = ox0 * p.stride_x - p.pad_left,
                  last_ix =
                      (ox0 + pixels - 1) * p.stride_x - p.pad_left + (p.kw - 1) * p.dilation_x;
    // Inside X: each pixel's taps are read at taps.offset from its corner; else from a patch.
    const bool inside = rows_inside && pixels == kPixels && first_ix >= 0 && last_ix < p.w;
    const float* corner[kPixels];
    if (inside) {
      for (int64_t q = 0; q < kPixels; ++q)
        corner[q] = x + iy0 * x_row + (first_ix + q * p.stride_x) * x_column;
    } else {
      for (int64_t q = 0; q < kPixels; ++q) {
        const int64_t ix0 = first_ix + q * p.stride_x;
        for (int64_t t = 0; t < t_count; ++t) {
          const int64_t iy = iy0 + taps.dy[t], ix = ix0 + taps.dx[t];
          patch[q][t] = q < pixels && iy >= 0 && iy < p.h && ix >= 0 && ix < p.w
                            ? x[iy0 * x_row + ix0 * x_column + taps.offset[t]]
                            : 0.0f;
        }
      }
    }
    for (int64_t mb = 0; mb < mp; mb += kColumns) {
      Columns b;
      __builtin_memcpy(&b, bias + mb, sizeof b);
      Columns acc[kPixels];
      for (int64_t q = 0; q < kPixels; ++q) acc[q] = b;
      if (inside) {
        for (int64_t t = 0; t < t_count; ++t) {
          Columns w;
          __builtin_memcpy(&w, wt + t * mp + mb, sizeof w);
          const int64_t at = taps.offset[t];
          for (int64_t q = 0; q < kPixels; ++q) acc[q] += corner[q][at] * w;
        }
      } else {
        for (int64_t t = 0; t < t_count; ++t) {
          Columns w;
          __builtin_memcpy(&w, wt + t * mp + mb, sizeof w);
          for (int64_t q = 0; q < kPixels; ++q) acc[q] += patch[q][t] * w;
        }
      }
      for (int64_t q = 0; q < pixels; ++q)
        store_columns(p, y_at, acc[q], mb, oy * p.ow + ox0 + q, relu, y);
    }
  }
}

}  // namespace

std::shared_ptr<const FewChannelConv> plan_few_channel_conv(
    InferContext& ctx, const ConvShapes& s, const Tensor& w, const FusedActivation& act,
    StoredLayout x_layout, StoredLayout y_layout, bool only_if_planned) {
  const WindowGeometry& g = s.win;
  if (g.in.size() != 2 || s.group != 1 || w.dtype() != DType::Float || s.m % 8 != 0 ||
      y_layout == StoredLayout::ChannelsFirst)
    return nullptr;
  const int64_t taps = s.c * g.kernel[0] * g.kernel[1];
  if (taps > FewChannelConv::kMaxTaps) return nullptr;
  // (Blocked X: whole blocks of channels, as the layout passes store them.)
  if (block_channels(x_layout) && s.c % block_channels(x_layout) != 0) return nullptr;
  auto p = std::make_shared<FewChannelConv>();
  p->n = s.n;
  p->c = s.c;
  p->m = s.m;
  p->m_padded = (s.m + kColumns - 1) / kColumns * kColumns;
  p->taps = taps;
  p->h = g.in[0];
  p->w = g.in[1];
  p->oh = g.out[0];
  p->ow = g.out[1];
  p->kh = g.kernel[0];
  p->kw = g.kernel[1];
  p->stride_y = g.strides[0];
  p->stride_x = g.strides[1];
  p->dilation_y = g.dilations[0];
  p->dilation_x = g.dilations[1];
  p->pad_top = g.pad_begin[0];
  p->pad_left = g.pad_begin[1];
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
  const XStrides xs = x_strides(p.x_layout, p.c, p.h, p.w);
  Taps taps{};
  for (int64_t c = 0, t = 0; c < p.c; ++c)
    for (int64_t i = 0; i < p.kh; ++i)
      for (int64_t j = 0; j < p.kw; ++j, ++t) {
        taps.dy[t] = i * p.dilation_y;
        taps.dx[t] = j * p.dilation_x;
        taps.offset[t] = xs.channel_offset(c) + taps.dy[t] * xs.row + taps.dx[t] * xs.column;
      }
  std::vector<float> padded_bias(static_cast<size_t>(p.m_padded), 0.0f);
  if (bias) std::copy_n(bias, p.m, padded_bias.begin());
  const ChannelGroups y_at(p.y_layout, p.m, p.oh * p.ow, 8);
  const int64_t x_image = p.c * p.h * p.w, y_image = p.m * p.oh * p.ow;
  const int64_t rows = p.n * p.oh;
  parallel_for(rows, rows * p.ow * p.m_padded * p.taps > (int64_t{1} << 16), [&](int64_t r) {
    const int64_t image = r / p.oh, oy = r % p.oh;
    few_channel_row(p, taps, xs.row, xs.column, x + image * x_image, oy, padded_bias.data(), y_at,
                    y + image * y_image);
  });
}

}  // namespace volt
