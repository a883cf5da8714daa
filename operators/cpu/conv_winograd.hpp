// A 3x3 stride-1 convolution (dilated or not) by Winograd's F(4x4, 3x3), on AVX2 or AVX-512
// (the kernel is written once, conv_winograd_kernel.inc, and compiled for each). oneDNN 2.6 has a
// Winograd kernel for AVX-512 only; on AVX2 it runs its direct jit:avx2 convolution (1.2-1.5x
// behind ONNX Runtime's MLAS on ResNet's and GoogLeNet's 3x3 layers), and dilated 3x3s as a gemm
// over an im2col buffer. On AVX-512 volt's is as fast or faster than oneDNN's at batch 1 and 8,
// and a new input shape costs it no primitive and no weight transform (oneDNN's transforms the
// weights again for each problem shape: 5 ms a layer).
//
// Each 4x4 tile of outputs reads a 6x6 patch of X; per channel the patch is transformed
// (V = Bt d B), multiplied element-wise by the transformed 3x3 kernel (U = G g Gt, once per
// session), and transformed back (Y = At M A). Summed over channels, the 36 element-wise products
// become 36 matrix products [tiles x C] x [C x M]: 36 x C x M multiplications per tile instead of
// the direct convolution's 144 x C x M. The tiles are split into chunks, one thread each, so
// that a chunk's transformed patches and products stay in that core's caches between the three
// steps; bias, a residual (the sum post-op) and the activation are applied as the tiles come
// back.
//
// X, Y and the residual are stored channels-last or in blocks of 8 or 16 channels (what the
// layout passes choose), with channels a multiple of the vector's 8 or 16 floats (16 where the
// channels and blocks allow, else 8).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "operators/common/fused_activation.hpp"
#include "operators/common/layout.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/kernel.hpp"

namespace volt {

// Where the `lanes` channels of group g (channels lanes g .. lanes g + lanes - 1) of pixel p lie
// in a stored image: (g / groups_per_block) block_stride + p pixel_stride + (g % groups_per_block)
// lanes.
struct ChannelGroups {
  int64_t pixel_stride = 0, block_stride = 0, groups_per_block = 1, lanes = 8;
  ChannelGroups(StoredLayout layout, int64_t channels, int64_t pixels, int64_t lanes);
  ChannelGroups() = default;
  int64_t at(int64_t g, int64_t p) const {
    return g / groups_per_block * block_stride + p * pixel_stride + g % groups_per_block * lanes;
  }
};

struct WinogradConv {
  int64_t lanes = 8;  // floats a vector: 8 (AVX2) or 16 (AVX-512)
  int64_t n = 0, c = 0, m = 0;
  int64_t m_padded = 0;  // M rounded up to the products' blocks of 2 x lanes columns
  int64_t h = 0, w = 0, oh = 0, ow = 0, pad_top = 0, pad_left = 0;
  // A tile's 4x4 outputs are (oy, ox) + (dy i, dx j) and its patch X's rows oy - pad_top + dy r
  // and columns ox - pad_left + dx q (dy, dx: the dilations): a dilated kernel is an undilated
  // one over each of the dy x dx interleaved grids of X and Y, and the tiles cover each grid.
  int64_t dy = 1, dx = 1;
  struct Origin {
    int32_t oy, ox;
  };
  std::vector<Origin> origins;    // of one image's tiles
  int64_t chunk = 0, chunks = 0;  // tiles per chunk, and their count
  int64_t column_parts = 1;  // each chunk's columns (blocks of 2 lanes) split into this many parts
  int threads = 1;
  ChannelGroups x_at, y_at;
  FusedActivation act;
  std::shared_ptr<const Tensor> u;  // [36][M' / 2 lanes][C][2 lanes]: the transformed weights
  size_t v_floats = 0, m_floats = 0, per_thread = 0;  // a chunk's scratch (bytes per thread)
};

// The widest vectors the kernel runs on here: 16 floats (AVX-512), 8 (AVX2 and FMA), or 0.
int winograd_conv_lanes();

// The plan for a 2-D 3x3 stride-1 f32 convolution of one group with constant weights
// `w`, X stored as `x_layout` and Y (and the residual) as `y_layout`; null where it does not
// suit (other geometries, channels not a multiple of 8, channels-first data). The transformed
// weights are kept in the node's memo where it has one, shared by every plan of the session.
std::shared_ptr<const WinogradConv> plan_winograd_conv(InferContext& ctx, const ConvShapes& s,
                                                       const Tensor& w, const FusedActivation& act,
                                                       StoredLayout x_layout,
                                                       StoredLayout y_layout);

// Y = act(conv(X) + bias + residual); bias and residual may be null, and the residual may be Y.
void run_winograd_conv(const WinogradConv& p, const float* x, const float* bias,
                       const float* residual, float* y, void* scratch);

}  // namespace volt
