#include "operators/cpu/conv_winograd.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <string>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/own_activation.hpp"
#include "operators/common/parallel.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

constexpr int kTile = 4;         // outputs per tile side
constexpr int kPatch = 6;        // inputs per patch side
constexpr int kPositions = 36;   // kPatch x kPatch: one matrix product each
constexpr int64_t kDepth = 256;  // channels per pass of a product (a block of U in L1)

// Tiles per chunk: up to kMaxChunk, so that each pass over U (36 x C x M floats, 9 MB for 256
// -> 256 channels) serves as many tiles as the chunk's scratch (kChunkBytes a thread) holds.
constexpr int64_t kChunkBytes = 8 << 20;
constexpr int64_t kMaxChunk = 48;

// The transform matrices of F(4x4, 3x3) (interpolation points 0, ±1, ±2 and infinity).
constexpr double kG[kPatch][3] = {{1.0 / 4, 0, 0},
                                  {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                  {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                  {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                  {0, 0, 1}};

}  // namespace

// The kernel once per instruction set (the library is built for baseline x86-64: each copy runs
// only where the CPU has its set, as plan_winograd_conv chooses).
namespace winograd_avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma")
using V = __m256;
constexpr int kLanes = 8;
constexpr int kMaxRows = 6;  // 12 accumulators of the 16 registers
inline V vfmadd(V a, V b, V c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline V vfnmadd(V a, V b, V c) {
  return _mm256_fnmadd_ps(a, b, c);
}
#include "operators/cpu/conv_winograd_kernel.inc"
#pragma GCC pop_options
}  // namespace winograd_avx2

namespace winograd_avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f")
using V = __m512;
constexpr int kLanes = 16;
constexpr int kMaxRows = 12;  // 24 accumulators of the 32 registers
inline V vfmadd(V a, V b, V c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline V vfnmadd(V a, V b, V c) {
  return _mm512_fnmadd_ps(a, b, c);
}
#include "operators/cpu/conv_winograd_kernel.inc"
#pragma GCC pop_options
}  // namespace winograd_avx512

namespace {

// U = G g Gt for every (output, input) channel pair, laid out [36][M' / columns][C][columns]
// (M' = M rounded up to a whole block of columns; the columns past M zero). Once per session,
// but in the first run: by blocks of columns in parallel, each block's 36 rows of `columns`
// floats written whole (ResNet-50's first run at batch 8: 380-490 ms with a serial loop that
// wrote one float per row, against 315-330 with oneDNN's direct convolutions).
std::shared_ptr<const Tensor> transform_weights(const float* w, int64_t m, int64_t c,
                                                int64_t m_padded, int64_t columns, int threads) {
  auto u =
      std::make_shared<Tensor>(allocate_lasting_tensor(DType::Float, {kPositions * m_padded * c}));
  float* out = u->data<float>();
  const int64_t column_blocks = m_padded / columns;
  parallel_for(column_blocks, threads > 1, [&](int64_t cb) {
    for (int64_t i = 0; i < c; ++i)
      if (columns == winograd_avx512::kColumns)
        winograd_avx512::transform_weight_columns(w, m, c, cb, i, column_blocks, out);
      else
        winograd_avx2::transform_weight_columns(w, m, c, cb, i, column_blocks, out);
  });
  return u;
}

}  // namespace

ChannelGroups::ChannelGroups(StoredLayout layout, int64_t channels, int64_t pixels, int64_t lanes) {
  const int64_t block = block_channels(layout);
  pixel_stride = block ? block : channels;
  block_stride = block ? block * pixels : 0;
  groups_per_block = block ? block / lanes : channels / lanes;
  this->lanes = lanes;
}

int winograd_conv_lanes() {
  // (Following oneDNN's choice of instruction set, which ONEDNN_MAX_CPU_ISA may cap: the layout
  // passes then store blocks of its width.)
  static const int lanes = cpu_has_avx512()                                                  ? 16
                           : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 8
                                                                                             : 0;
  return lanes;
}

std::shared_ptr<const WinogradConv> plan_winograd_conv(InferContext& ctx, const ConvShapes& s,
                                                       const Tensor& w, const FusedActivation& act,
                                                       StoredLayout x_layout,
                                                       StoredLayout y_layout) {
  const WindowGeometry& g = s.win;
  if (g.in.size() != 2 || s.group != 1 || g.kernel != std::vector<int64_t>{3, 3} ||
      x_layout == StoredLayout::ChannelsFirst || y_layout == StoredLayout::ChannelsFirst ||
      w.dtype() != DType::Float)
    return nullptr;
  for (size_t d = 0; d < 2; ++d)
    if (g.strides[d] != 1) return nullptr;
  // The widest vectors the CPU has whose groups of channels the stored layouts keep whole.
  auto fits = [&](int64_t lanes) {
    return s.c % lanes == 0 && s.m % lanes == 0 && block_channels(x_layout) % lanes == 0 &&
           block_channels(y_layout) % lanes == 0;
  };
  int64_t lanes = winograd_conv_lanes();
  if (lanes == 16 && !fits(16)) lanes = 8;
  if (lanes == 0 || !fits(lanes)) return nullptr;
  auto p = std::make_shared<WinogradConv>();
  p->lanes = lanes;
  const int64_t columns = 2 * lanes,
                rows = lanes == 16 ? winograd_avx512::kMaxRows : winograd_avx2::kMaxRows;
  p->n = s.n;
  p->c = s.c;
  p->m = s.m;
  p->m_padded = (s.m + columns - 1) / columns * columns;
  p->h = g.in[0];
  p->w = g.in[1];
  p->oh = g.out[0];
  p->ow = g.out[1];
  p->pad_top = g.pad_begin[0];
  p->pad_left = g.pad_begin[1];
  p->dy = g.dilations[0];
  p->dx = g.dilations[1];
  for (int64_t gy = 0; gy < std::min(p->dy, p->oh); ++gy)
    for (int64_t gx = 0; gx < std::min(p->dx, p->ow); ++gx) {
      const int64_t grid_rows = (p->oh - gy + p->dy - 1) / p->dy,
                    grid_cols = (p->ow - gx + p->dx - 1) / p->dx;
      for (int64_t a = 0; a < grid_rows; a += kTile)
        for (int64_t b = 0; b < grid_cols; b += kTile)
          p->origins.push_back(
              {static_cast<int32_t>(gy + a * p->dy), static_cast<int32_t>(gx + b * p->dx)});
    }
  p->x_at = ChannelGroups(x_layout, p->c, p->h * p->w, lanes);
  p->y_at = ChannelGroups(y_layout, p->m, p->oh * p->ow, lanes);
  p->act = act;

  // Chunks of tiles: as many as fit kChunkBytes, evened out over the threads; where there are
  // fewer chunks than threads (a batch of one small map: ResNet's 14x14 layers have 16 tiles),
  // each chunk's columns are split among them.
  const int64_t tiles = p->n * static_cast<int64_t>(p->origins.size());
  const int64_t bytes_per_tile = kPositions * (p->c + p->m_padded) * int64_t{sizeof(float)};
  const int64_t chunk = std::clamp(kChunkBytes / bytes_per_tile, rows, kMaxChunk);
  const int threads = std::max(1, ctx.threads());
  int64_t chunks = (tiles + chunk - 1) / chunk;
  if (chunks >= threads && chunks < 4 * threads)
    chunks = std::min(tiles, (chunks + threads - 1) / threads * threads);
  p->chunk = (tiles + chunks - 1) / chunks;
  p->chunks = (tiles + p->chunk - 1) / p->chunk;
  p->column_parts =
      std::clamp<int64_t>((threads + p->chunks - 1) / p->chunks, 1, p->m_padded / columns);
  p->threads = static_cast<int>(std::min<int64_t>(threads, p->chunks * p->column_parts));
  p->v_floats = static_cast<size_t>(kPositions * p->chunk * p->c);
  p->m_floats = static_cast<size_t>(kPositions * p->chunk * p->m_padded);
  p->per_thread = dnnl_adapter::align64(p->v_floats * sizeof(float)) +
                  dnnl_adapter::align64(p->m_floats * sizeof(float));
  ctx.request_scratch(p->per_thread * static_cast<size_t>(p->threads));

  // The transformed weights, once per session: every plan of this node (a new input shape)
  // shares them through the memo.
  std::string key = "winograd weights";
  const uintptr_t at = reinterpret_cast<uintptr_t>(w.raw());
  key.append(reinterpret_cast<const char*>(&at), sizeof at);
  key.append(reinterpret_cast<const char*>(&columns), sizeof columns);
  if (NodeMemo* memo = ctx.memo()) p->u = std::static_pointer_cast<const Tensor>(memo->find(key));
  if (!p->u) {
    p->u = transform_weights(w.data<float>(), p->m, p->c, p->m_padded, columns, threads);
    if (NodeMemo* memo = ctx.memo()) memo->keep(key, std::const_pointer_cast<Tensor>(p->u));
  }
  return p;
}

void run_winograd_conv(const WinogradConv& p, const float* x, const float* bias,
                       const float* residual, float* y, void* scratch) {
  const int64_t tiles = p.n * static_cast<int64_t>(p.origins.size());
  const int64_t blocks = p.m_padded / (2 * p.lanes), items = p.chunks * p.column_parts;
  auto item = [&](int64_t i, int thread) {
    char* mine = static_cast<char*>(scratch) + static_cast<size_t>(thread) * p.per_thread;
    float* v = reinterpret_cast<float*>(mine);
    float* m = reinterpret_cast<float*>(mine + dnnl_adapter::align64(p.v_floats * sizeof(float)));
    const int64_t first = i / p.column_parts * p.chunk, part = i % p.column_parts;
    const int64_t rows = std::min(p.chunk, tiles - first);
    const int64_t first_block = blocks * part / p.column_parts,
                  last_block = blocks * (part + 1) / p.column_parts;
    if (p.lanes == 16)
      winograd_avx512::run_chunk(p, first, rows, first_block, last_block, x, bias, residual, y, v,
                                 m);
    else
      winograd_avx2::run_chunk(p, first, rows, first_block, last_block, x, bias, residual, y, v, m);
  };
  if (p.threads > 1) {
#pragma omp parallel for num_threads(p.threads) schedule(static)
    for (int64_t i = 0; i < items; ++i) item(i, omp_get_thread_num());
  } else {
    for (int64_t i = 0; i < items; ++i) item(i, 0);
  }
}

}  // namespace volt
