// ChannelShuffle (ai.volt): ShuffleNet's Reshape of X to S1 = [N, g, C/g, H, W], Transpose
// (0, 2, 1, 3, 4) and Reshape to S2 = [N, C, H, W], as one node (fuse_channel_shuffle). Inputs:
// X, S1 and S2, the two Reshapes' shape inputs as they were (exporters compute them from Shape,
// so they are known when a plan is built, not when the graph is compiled; 0 and -1 resolve as in
// Reshape). Any S1 of five dimensions and any S2 compute what the three nodes computed.
//
// volt.layout = "NHWC" (use_channels_last): X and Y are channels-last ([N, H, W, C]) and Y is
// 4-D. Where S1 splits only the channels and S2 gives back [N, C, H, W] (every ShuffleNet), each
// pixel's channels are permuted in place of their row: channel i·(C/g) + j goes to j·g + i. Any
// other S1 and S2 go through the channels-first index arithmetic, element by element.
#include <cstring>

#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

struct ShuffleGeometry {
  Shape x;      // X's channels-first shape (X's own when not channels-last)
  Shape split;  // S1 resolved over x: five dimensions
  Shape y;      // Y's channels-first shape
  bool channels_last = false;
  bool per_pixel = false;  // channels-last, S1 = [N, g, C/g, H, W], Y = [N, C, H, W]
};

// Copies elements of `bytes` bytes each.
void copy_elements(const char* from, char* to, int64_t count, size_t bytes) {
  std::memcpy(to, from, static_cast<size_t>(count) * bytes);
}

class ChannelShuffle final : public Kernel {
 public:
  explicit ChannelShuffle(const Node& n)
      : channels_last_(n.attr_string("volt.layout", "") == "NHWC") {}

  void infer(InferContext& ctx) const override {
    const Tensor* s1 = ctx.input_tensor(1);
    const Tensor* s2 = ctx.input_tensor(2);
    if (ctx.dtype(0) == DType::String) throw KernelUnsupported{"strings"};
    if (!s1 || !s2) return ctx.set_output_unknown(0, ctx.dtype(0));
    auto st = std::make_shared<ShuffleGeometry>();
    st->channels_last = channels_last_;
    const Shape& x = ctx.shape(0);
    if (channels_last_) {
      if (x.size() != 4) ctx.error("a channels-last X must have 4 dimensions, got " + shape_str(x));
      st->x = {x[0], x[3], x[1], x[2]};
    } else {
      st->x = x;
    }
    st->split = resolve_reshape(st->x, to_int64_vector(*s1, ctx.node(), "S1"), false, ctx.node());
    if (st->split.size() != 5)
      ctx.input_error("the shuffle's Transpose (0, 2, 1, 3, 4) needs 5 dimensions, S1 gives " +
                      shape_str(st->split));
    const Shape& a = st->split;
    const Shape swapped = {a[0], a[2], a[1], a[3], a[4]};
    st->y = resolve_reshape(swapped, to_int64_vector(*s2, ctx.node(), "S2"), false, ctx.node());
    if (channels_last_ && st->y.size() != 4)
      ctx.error("a channels-last Y must have 4 dimensions, S2 gives " + shape_str(st->y));
    st->per_pixel = channels_last_ && a[0] == st->x[0] && a[3] == st->x[2] && a[4] == st->x[3] &&
                    st->y == st->x;
    const Shape& y = st->y;
    ctx.set_output(0, ctx.dtype(0), channels_last_ ? Shape{y[0], y[2], y[3], y[1]} : y);
    ctx.set_state(std::move(st));
  }

  void run(RunContext& ctx) const override {
    const auto& st = ctx.state<ShuffleGeometry>();
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const size_t bytes = dtype_size(x.dtype());
    const char* from = static_cast<const char*>(x.raw());
    char* to = static_cast<char*>(y.raw());
    const bool parallel = ctx.threads() > 1 && x.nbytes() >= (64u << 10);
    if (st.per_pixel) return shuffle_pixels(st, from, to, bytes, parallel);
    if (!st.channels_last) return swap_planes(st, from, to, bytes, parallel);
    shuffle_any(st, from, to, bytes);
  }

 private:
  // Channels-last, S1 splitting the channels only: per pixel, channel i·k + j -> j·g + i.
  static void shuffle_pixels(const ShuffleGeometry& st, const char* from, char* to, size_t bytes,
                             bool parallel) {
    const int64_t g = st.split[1], k = st.split[2], c = g * k;
    const int64_t pixels = st.x[0] * st.x[2] * st.x[3];
    auto pixel_rows = [&](int64_t lo, int64_t hi) {
      if (bytes == 4 && g == 2) {  // (every ShuffleNet: two halves interleaved, vectorized)
        for (int64_t p = lo; p < hi; ++p) {
          const auto* first = reinterpret_cast<const uint32_t*>(from) + p * c;
          const uint32_t* second = first + k;
          auto* out = reinterpret_cast<uint32_t*>(to) + p * c;
          for (int64_t j = 0; j < k; ++j) {
            out[2 * j] = first[j];
            out[2 * j + 1] = second[j];
          }
        }
        return;
      }
      if (bytes == 4) {
        const auto* in = reinterpret_cast<const uint32_t*>(from);
        auto* out = reinterpret_cast<uint32_t*>(to);
        for (int64_t p = lo; p < hi; ++p)
          for (int64_t j = 0; j < k; ++j)
            for (int64_t i = 0; i < g; ++i) out[p * c + j * g + i] = in[p * c + i * k + j];
        return;
      }
      for (int64_t p = lo; p < hi; ++p)
        for (int64_t j = 0; j < k; ++j)
          for (int64_t i = 0; i < g; ++i)
            copy_elements(from + static_cast<size_t>(p * c + i * k + j) * bytes,
                          to + static_cast<size_t>(p * c + j * g + i) * bytes, 1, bytes);
    };
    if (!parallel) return pixel_rows(0, pixels);
    parallel_chunks(pixels, 64, pixel_rows);
  }

  // Channels-first: the Transpose moves planes of S1[3]·S1[4] elements whole.
  static void swap_planes(const ShuffleGeometry& st, const char* from, char* to, size_t bytes,
                          bool parallel) {
    const Shape& a = st.split;
    const int64_t plane = a[3] * a[4], blocks = a[0] * a[1] * a[2];
    parallel_for(blocks, parallel, [&](int64_t b) {
      const int64_t n = b / (a[1] * a[2]), i = b / a[2] % a[1], j = b % a[2];
      copy_elements(from + static_cast<size_t>(((n * a[1] + i) * a[2] + j) * plane) * bytes,
                    to + static_cast<size_t>(((n * a[2] + j) * a[1] + i) * plane) * bytes, plane,
                    bytes);
    });
  }

  // Channels-last with any other S1 and S2: each element of Y (its channels-first flat index is
  // the swapped 5-D array's) from where it lies in channels-last X.
  static void shuffle_any(const ShuffleGeometry& st, const char* from, char* to, size_t bytes) {
    const Shape &a = st.split, &x = st.x, &y = st.y;
    const int64_t total = numel_of(y);
    for (int64_t f = 0; f < total; ++f) {
      // f in the swapped array [a0, a2, a1, a3, a4] -> the same element in S1's order.
      int64_t r = f;
      const int64_t w = r % a[4];
      r /= a[4];
      const int64_t h = r % a[3];
      r /= a[3];
      const int64_t i = r % a[1];
      r /= a[1];
      const int64_t j = r % a[2];
      const int64_t n = r / a[2];
      const int64_t s =
          (((n * a[1] + i) * a[2] + j) * a[3] + h) * a[4] + w;  // X's channels-first index
      const int64_t xw = s % x[3], xh = s / x[3] % x[2], xc = s / (x[2] * x[3]) % x[1],
                    xn = s / (x[1] * x[2] * x[3]);
      // Y's element f (channels-first) -> its channels-last place.
      const int64_t yw = f % y[3], yh = f / y[3] % y[2], yc = f / (y[2] * y[3]) % y[1],
                    yn = f / (y[1] * y[2] * y[3]);
      copy_elements(from + static_cast<size_t>(((xn * x[2] + xh) * x[3] + xw) * x[1] + xc) * bytes,
                    to + static_cast<size_t>(((yn * y[2] + yh) * y[3] + yw) * y[1] + yc) * bytes, 1,
                    bytes);
    }
  }

  bool channels_last_;
};

}  // namespace

VOLT_REGISTER_KERNEL(channel_shuffle, volt_kernel("ChannelShuffle", make_kernel<ChannelShuffle>));

}  // namespace volt
