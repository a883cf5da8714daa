#include "operators/cpu/conv_as_product.hpp"

#include <algorithm>
#include <cstring>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/parallel.hpp"

namespace volt {

namespace {

// Gathered rows per pass: about a MiB of them, so that a large image's rows need not all be in
// the scratch at once, and never fewer than the product's parallel blocks make worthwhile.
constexpr int64_t kPassFloats = int64_t{1} << 18;
constexpr int64_t kMinPassRows = 96;

// Where channel `c` of pixel (n, y, x) of a [N, C, H, W] tensor lies in `layout` (blocked
// layouts keep ceil(C / block) blocks, the last one padded).
struct PixelAddress {
  StoredLayout layout;
  int64_t c, h, w, block;
  PixelAddress(StoredLayout l, int64_t channels, int64_t height, int64_t width)
      : layout(l), c(channels), h(height), w(width), block(block_channels(l)) {}
  int64_t blocks() const { return (c + block - 1) / block; }
  // The offset of the pixel's channel 0 (its next channels lie h·w apart channels-first, next to
  // it channels-last, and in blocks h·w·block apart in a blocked layout).
  int64_t pixel(int64_t n, int64_t y, int64_t x) const {
    switch (layout) {
      case StoredLayout::ChannelsLast:
        return ((n * h + y) * w + x) * c;
      case StoredLayout::ChannelsFirst:
        return (n * c * h + y) * w + x;
      default:
        return ((n * blocks() * h + y) * w + x) * block;
    }
  }
};

// The window of output pixel `row` (n, oy, ox in order) into `to`: KH·KW runs of C floats.
void gather_row(const ConvAsProduct& p, const PixelAddress& at, const float* x, int64_t row,
                float* to) {
  const int64_t ox = row % p.ow, oy = row / p.ow % p.oh, n = row / (p.ow * p.oh);
  for (int64_t ky = 0; ky < p.kh; ++ky) {
    const int64_t iy = oy * p.stride_y - p.pad_top + ky * p.dilation_y;
    for (int64_t kx = 0; kx < p.kw; ++kx, to += p.c) {
      const int64_t ix = ox * p.stride_x - p.pad_left + kx * p.dilation_x;
      if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) {
        std::fill(to, to + p.c, 0.0f);
        continue;
      }
      const float* from = x + at.pixel(n, iy, ix);
      switch (p.x_layout) {
        case StoredLayout::ChannelsLast:
          std::memcpy(to, from, static_cast<size_t>(p.c) * sizeof(float));
          break;
        case StoredLayout::ChannelsFirst:
          for (int64_t c = 0; c < p.c; ++c) to[c] = from[c * p.h * p.w];
          break;
        default: {
          const int64_t plane = p.h * p.w * at.block;  // from one block of channels to the next
          for (int64_t c0 = 0; c0 < p.c; c0 += at.block)
            std::memcpy(to + c0, from + c0 / at.block * plane,
                        static_cast<size_t>(std::min(at.block, p.c - c0)) * sizeof(float));
        }
      }
    }
  }
}

// Output pixel `row`'s M channels (`from`) into Y as stored (a blocked layout's padding channels
// zero, as oneDNN's kernels expect them).
void scatter_row(const ConvAsProduct& p, const PixelAddress& at, const float* from, int64_t row,
                 float* y) {
  const int64_t ox = row % p.ow, oy = row / p.ow % p.oh, n = row / (p.ow * p.oh);
  float* to = y + at.pixel(n, oy, ox);
  if (p.y_layout == StoredLayout::ChannelsFirst) {
    for (int64_t m = 0; m < p.m; ++m) to[m * p.oh * p.ow] = from[m];
    return;
  }
  const int64_t plane = p.oh * p.ow * at.block;
  for (int64_t m0 = 0; m0 < p.m; m0 += at.block) {
    float* block = to + m0 / at.block * plane;
    const int64_t valid = std::min(at.block, p.m - m0);
    std::memcpy(block, from + m0, static_cast<size_t>(valid) * sizeof(float));
    std::fill(block + valid, block + at.block, 0.0f);
  }
}

}  // namespace

std::shared_ptr<const ConvAsProduct> plan_conv_as_product(InferContext& ctx, const ConvShapes& s,
                                                          const Tensor& w, bool has_bias,
                                                          const FusedActivation& act,
                                                          StoredLayout x_layout,
                                                          StoredLayout y_layout) {
  const WindowGeometry& g = s.win;
  if (g.in.size() != 2 || s.group != 1 || w.dtype() != DType::Float) return nullptr;
  const int64_t taps = g.kernel[0] * g.kernel[1], k = taps * s.c;
  if (!packed_product_suits(ctx, k, s.m, act)) return nullptr;
  auto p = std::make_shared<ConvAsProduct>(s);
  // W [M, C, KH, KW]: row (tap t, channel c) of column m at m·K + c·taps + t.
  p->product = plan_packed_product(ctx, w, k, s.m, taps, k, has_bias, act, false, s.c, 1);
  p->x_layout = x_layout;
  p->y_layout = y_layout;
  const int64_t rows = s.n * p->oh * p->ow;
  // A 1x1 window over channels-last X, unstrided and unpadded: X's pixels are the rows.
  p->x_is_rows = x_layout == StoredLayout::ChannelsLast && taps == 1 && p->stride_y == 1 &&
                 p->stride_x == 1 && p->pad_top == 0 && p->pad_left == 0 && p->oh == p->h &&
                 p->ow == p->w;
  p->rows_per_pass = std::min(rows, std::max(kMinPassRows, kPassFloats / k));
  const size_t gathered =
      p->x_is_rows ? 0 : static_cast<size_t>(p->rows_per_pass * k) * sizeof(float);
  p->y_at = dnnl_adapter::align64(gathered);
  const size_t product_rows = y_layout == StoredLayout::ChannelsLast
                                  ? 0
                                  : static_cast<size_t>(p->rows_per_pass * s.m) * sizeof(float);
  ctx.request_scratch(p->y_at + product_rows);
  return p;
}

void run_conv_as_product(const ConvAsProduct& p, const float* x, const float* bias, float* y,
                         void* scratch, int threads) {
  const PixelAddress x_at(p.x_layout, p.c, p.h, p.w), y_at(p.y_layout, p.m, p.oh, p.ow);
  const int64_t k = p.kh * p.kw * p.c, rows = p.n * p.oh * p.ow;
  float* gathered = static_cast<float*>(scratch);
  float* product = reinterpret_cast<float*>(static_cast<char*>(scratch) + p.y_at);
  const bool channels_last = p.y_layout == StoredLayout::ChannelsLast;
  for (int64_t first = 0; first < rows; first += p.rows_per_pass) {
    const int64_t count = std::min(p.rows_per_pass, rows - first);
    const bool parallel = threads > 1 && count * k >= 16384;
    if (!p.x_is_rows)
      parallel_for(count, parallel,
                   [&](int64_t r) { gather_row(p, x_at, x, first + r, gathered + r * k); });
    // (Channels-last rows are Y's own: the product writes them in place.)
    float* out = channels_last ? y + first * p.m : product;
    run_packed_product(*p.product, p.x_is_rows ? x + first * k : gathered, count, bias, nullptr,
                       out, threads);
    if (!channels_last)
      parallel_for(count, parallel,
                   [&](int64_t r) { scatter_row(p, y_at, product + r * p.m, first + r, y); });
  }
}

}  // namespace volt
