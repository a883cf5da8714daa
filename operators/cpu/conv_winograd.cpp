#include "operators/cpu/conv_winograd.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "operators/common/dnnl_adapter.hpp"
#include "runtime/tensor_alloc.hpp"

// The library is built for baseline x86-64: everything with AVX2 intrinsics carries this target
// and runs only where winograd_conv_runs_here() holds.
#define VOLT_AVX2 __attribute__((target("avx2,fma")))
#define VOLT_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace volt {
namespace {

constexpr int kTile = 4;         // outputs per tile side
constexpr int kPatch = 6;        // inputs per patch side
constexpr int kPositions = 36;   // kPatch x kPatch: one matrix product each
constexpr int64_t kRows = 6;     // tiles per register block of the products
constexpr int64_t kDepth = 256;  // channels per pass of a product (16 columns of U in L1)

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

// Bt applied to six vectors in[0], in[s], … in[5 s]: the input transform along one axis.
VOLT_AVX2_INLINE void input_transform6(const __m256* in, int s, __m256* out, int o) {
  const __m256 two = _mm256_set1_ps(2), four = _mm256_set1_ps(4), five = _mm256_set1_ps(5);
  const __m256 d0 = in[0], d1 = in[s], d2 = in[2 * s], d3 = in[3 * s], d4 = in[4 * s],
               d5 = in[5 * s];
  out[0] = _mm256_fmadd_ps(four, d0, _mm256_fnmadd_ps(five, d2, d4));
  out[o] = _mm256_fnmadd_ps(four, _mm256_add_ps(d1, d2), _mm256_add_ps(d3, d4));
  out[2 * o] = _mm256_fmadd_ps(four, _mm256_sub_ps(d1, d2), _mm256_sub_ps(d4, d3));
  const __m256 odd = _mm256_sub_ps(d3, d1), even = _mm256_sub_ps(d4, d2);
  out[3 * o] = _mm256_fmadd_ps(two, odd, even);
  out[4 * o] = _mm256_fnmadd_ps(two, odd, even);
  out[5 * o] = _mm256_fmadd_ps(four, d1, _mm256_fnmadd_ps(five, d3, d5));
}

// At applied to six vectors: the output transform along one axis (six products -> four outputs).
VOLT_AVX2_INLINE void output_transform6(const __m256* in, int s, __m256* out, int o) {
  const __m256 two = _mm256_set1_ps(2), four = _mm256_set1_ps(4), eight = _mm256_set1_ps(8);
  const __m256 sum12 = _mm256_add_ps(in[s], in[2 * s]), dif12 = _mm256_sub_ps(in[s], in[2 * s]);
  const __m256 sum34 = _mm256_add_ps(in[3 * s], in[4 * s]),
               dif34 = _mm256_sub_ps(in[3 * s], in[4 * s]);
  out[0] = _mm256_add_ps(_mm256_add_ps(in[0], sum12), sum34);
  out[o] = _mm256_fmadd_ps(two, dif34, dif12);
  out[2 * o] = _mm256_fmadd_ps(four, sum34, sum12);
  out[3 * o] = _mm256_add_ps(_mm256_fmadd_ps(eight, dif34, dif12), in[5 * s]);
}

// The fused activation on eight values; the rare ones through the reference function.
VOLT_AVX2_INLINE __m256 activate(__m256 v, const FusedActivation& a) {
  using Kind = FusedActivation::Kind;
  switch (a.kind) {
    case Kind::None:
      return v;
    case Kind::Relu:  // (max returns its second operand where one is NaN: NaN stays NaN)
      return _mm256_max_ps(_mm256_setzero_ps(), v);
    case Kind::Clip:
      return _mm256_min_ps(_mm256_set1_ps(a.beta), _mm256_max_ps(_mm256_set1_ps(a.alpha), v));
    case Kind::LeakyRelu:
      return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(a.alpha)),
                              _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    default: {
      alignas(32) float f[8];
      _mm256_store_ps(f, v);
      for (float& e : f) e = a.apply(e);
      return _mm256_load_ps(f);
    }
  }
}

// C[r, 0:16] (+)= sum over k of A[r, k] x B[k, 0:16] for R rows: 2R accumulators in registers.
template <int R>
VOLT_AVX2 void product_rows(const float* a, int64_t lda, const float* b, int64_t depth, float* c,
                            int64_t ldc, bool accumulate) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    lo[r] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
    hi[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < depth; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * 16), b1 = _mm256_loadu_ps(b + k * 16 + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r * lda + k);
      lo[r] = _mm256_fmadd_ps(ar, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(ar, b1, hi[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(c + r * ldc, lo[r]);
    _mm256_storeu_ps(c + r * ldc + 8, hi[r]);
  }
}

VOLT_AVX2 void product_block(int64_t rows, const float* a, int64_t lda, const float* b,
                             int64_t depth, float* c, int64_t ldc, bool accumulate) {
  switch (rows) {
    case 6:
      return product_rows<6>(a, lda, b, depth, c, ldc, accumulate);
    case 5:
      return product_rows<5>(a, lda, b, depth, c, ldc, accumulate);
    case 4:
      return product_rows<4>(a, lda, b, depth, c, ldc, accumulate);
    case 3:
      return product_rows<3>(a, lda, b, depth, c, ldc, accumulate);
    case 2:
      return product_rows<2>(a, lda, b, depth, c, ldc, accumulate);
    default:
      return product_rows<1>(a, lda, b, depth, c, ldc, accumulate);
  }
}

// One chunk of tiles [first, first + rows): patches into V [36][chunk][C], the 36 products into
// P [36][chunk][M16], and P back into Y.
// Columns [16 first_block, 16 last_block) of M only: a chunk too few to share among the threads
// is shared by columns too, each part transforming the chunk's patches for itself.
VOLT_AVX2 void run_chunk(const WinogradConv& p, int64_t first, int64_t rows, int64_t first_block,
                         int64_t last_block, const float* x, const float* bias,
                         const float* residual, float* y, float* v, float* m) {
  const int64_t per_image = static_cast<int64_t>(p.origins.size());
  const int64_t v_step = p.chunk * p.c, m_step = p.chunk * p.m16;
  const size_t x_image = static_cast<size_t>(p.h * p.w * p.c);
  const size_t y_image = static_cast<size_t>(p.oh * p.ow * p.m);
  const __m256 zero = _mm256_setzero_ps();

  // 1. The input transform, tile by tile, 8 channels at a time.
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t tile = first + t, image = tile / per_image;
    const WinogradConv::Origin origin = p.origins[static_cast<size_t>(tile % per_image)];
    const int64_t iy0 = origin.oy - p.pad_top, ix0 = origin.ox - p.pad_left;
    const float* xi = x + image * x_image;
    const bool inside =
        iy0 >= 0 && ix0 >= 0 && iy0 + (kPatch - 1) * p.dy < p.h && ix0 + (kPatch - 1) * p.dx < p.w;
    for (int64_t g = 0; g < p.c / 8; ++g) {
      const float* xg = xi + p.x_at.at(g, 0);
      __m256 d[kPatch * kPatch], t6[kPatch * kPatch], out[kPatch * kPatch];
      for (int r = 0; r < kPatch; ++r)
        for (int q = 0; q < kPatch; ++q) {
          const int64_t iy = iy0 + r * p.dy, ix = ix0 + q * p.dx;
          d[r * kPatch + q] = inside || (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w)
                                  ? _mm256_loadu_ps(xg + (iy * p.w + ix) * p.x_at.pixel_stride)
                                  : zero;
        }
      for (int q = 0; q < kPatch; ++q) input_transform6(d + q, kPatch, t6 + q, kPatch);
      for (int k = 0; k < kPatch; ++k) input_transform6(t6 + k * kPatch, 1, out + k * kPatch, 1);
      float* vt = v + t * p.c + g * 8;
      for (int i = 0; i < kPositions; ++i) _mm256_storeu_ps(vt + i * v_step, out[i]);
    }
  }

  // 2. The 36 products [rows x C] x [C x M16], 16 columns and up to kDepth channels at a time.
  const int64_t column_blocks = p.m16 / 16;
  for (int i = 0; i < kPositions; ++i) {
    const float* vi = v + i * v_step;
    float* mi = m + i * m_step;
    const float* ui = p.u->data<float>() + static_cast<size_t>(i * column_blocks * p.c * 16);
    for (int64_t cb = first_block; cb < last_block; ++cb) {
      const float* ub = ui + cb * p.c * 16;
      for (int64_t k0 = 0; k0 < p.c; k0 += kDepth) {
        const int64_t depth = std::min(kDepth, p.c - k0);
        for (int64_t r0 = 0; r0 < rows; r0 += kRows)
          product_block(std::min(kRows, rows - r0), vi + r0 * p.c + k0, p.c, ub + k0 * 16, depth,
                        mi + r0 * p.m16 + cb * 16, p.m16, k0 > 0);
      }
    }
  }

  // 3. The output transform, with bias, residual and activation, 8 channels at a time; tiles
  //    overhanging the output write only their part inside.
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t tile = first + t, image = tile / per_image;
    const WinogradConv::Origin origin = p.origins[static_cast<size_t>(tile % per_image)];
    const int64_t live_y = std::min<int64_t>(kTile, (p.oh - origin.oy + p.dy - 1) / p.dy),
                  live_x = std::min<int64_t>(kTile, (p.ow - origin.ox + p.dx - 1) / p.dx);
    float* yi = y + image * y_image;
    const float* ri = residual ? residual + image * y_image : nullptr;
    for (int64_t g = first_block * 2; g < std::min(last_block * 2, p.m / 8); ++g) {
      __m256 mm[kPatch * kPatch], s[kPatch * kTile], o[kTile * kTile];
      const float* mt = m + t * p.m16 + g * 8;
      for (int i = 0; i < kPositions; ++i) mm[i] = _mm256_loadu_ps(mt + i * m_step);
      for (int k = 0; k < kPatch; ++k) output_transform6(mm + k * kPatch, 1, s + k * kTile, 1);
      for (int l = 0; l < kTile; ++l) output_transform6(s + l, kTile, o + l, kTile);
      const __m256 b = bias ? _mm256_loadu_ps(bias + g * 8) : zero;
      const int64_t group = p.y_at.at(g, 0);
      for (int64_t i = 0; i < live_y; ++i)
        for (int64_t j = 0; j < live_x; ++j) {
          const int64_t at =
              group + ((origin.oy + i * p.dy) * p.ow + origin.ox + j * p.dx) * p.y_at.pixel_stride;
          __m256 out = _mm256_add_ps(o[i * kTile + j], b);
          if (ri) out = _mm256_add_ps(out, _mm256_loadu_ps(ri + at));
          _mm256_storeu_ps(yi + at, activate(out, p.act));
        }
    }
  }
}

// U = G g Gt for every (output, input) channel pair, laid out [36][M16 / 16][C][16] (columns
// past M zero).
std::shared_ptr<const Tensor> transform_weights(const float* w, int64_t m, int64_t c, int64_t m16) {
  auto u = std::make_shared<Tensor>(allocate_lasting_tensor(DType::Float, {kPositions * m16 * c}));
  float* out = u->data<float>();
  std::memset(out, 0, u->nbytes());
  const int64_t column_blocks = m16 / 16;
  for (int64_t o = 0; o < m; ++o)
    for (int64_t i = 0; i < c; ++i) {
      const float* g = w + (o * c + i) * 9;
      double gg[kPatch][3];  // G g
      for (int k = 0; k < kPatch; ++k)
        for (int b = 0; b < 3; ++b)
          gg[k][b] = kG[k][0] * g[b] + kG[k][1] * g[3 + b] + kG[k][2] * g[6 + b];
      for (int k = 0; k < kPatch; ++k)
        for (int j = 0; j < kPatch; ++j) {
          const double value = gg[k][0] * kG[j][0] + gg[k][1] * kG[j][1] + gg[k][2] * kG[j][2];
          const int64_t position = k * kPatch + j;
          out[((position * column_blocks + o / 16) * c + i) * 16 + o % 16] =
              static_cast<float>(value);
        }
    }
  return u;
}

}  // namespace

ChannelGroups::ChannelGroups(StoredLayout layout, int64_t channels, int64_t pixels) {
  const int64_t block = block_channels(layout);
  pixel_stride = block ? block : channels;
  block_stride = block ? block * pixels : 0;
  groups_per_block = block ? block / 8 : channels / 8;
}

bool winograd_conv_runs_here() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

std::shared_ptr<const WinogradConv> plan_winograd_conv(InferContext& ctx, const ConvShapes& s,
                                                       const Tensor& w, const FusedActivation& act,
                                                       StoredLayout x_layout,
                                                       StoredLayout y_layout) {
  const WindowGeometry& g = s.win;
  if (!winograd_conv_runs_here() || g.in.size() != 2 || s.group != 1 ||
      g.kernel != std::vector<int64_t>{3, 3} || s.c % 8 != 0 || s.m % 8 != 0 ||
      x_layout == StoredLayout::ChannelsFirst || y_layout == StoredLayout::ChannelsFirst ||
      w.dtype() != DType::Float)
    return nullptr;
  for (size_t d = 0; d < 2; ++d)
    if (g.strides[d] != 1) return nullptr;
  auto p = std::make_shared<WinogradConv>();
  p->n = s.n;
  p->c = s.c;
  p->m = s.m;
  p->m16 = (s.m + 15) / 16 * 16;
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
      const int64_t rows = (p->oh - gy + p->dy - 1) / p->dy,
                    cols = (p->ow - gx + p->dx - 1) / p->dx;
      for (int64_t a = 0; a < rows; a += kTile)
        for (int64_t b = 0; b < cols; b += kTile)
          p->origins.push_back(
              {static_cast<int32_t>(gy + a * p->dy), static_cast<int32_t>(gx + b * p->dx)});
    }
  p->x_at = ChannelGroups(x_layout, p->c, p->h * p->w);
  p->y_at = ChannelGroups(y_layout, p->m, p->oh * p->ow);
  p->act = act;

  // Chunks of tiles: as many as fit kChunkBytes, evened out over the threads; where there are
  // fewer chunks than threads (a batch of one small map: ResNet's 14x14 layers have 16 tiles),
  // each chunk's columns are split among them.
  const int64_t tiles = p->n * static_cast<int64_t>(p->origins.size());
  const int64_t bytes_per_tile = kPositions * (p->c + p->m16) * int64_t{sizeof(float)};
  const int64_t chunk = std::clamp(kChunkBytes / bytes_per_tile, kRows, kMaxChunk);
  const int threads = std::max(1, ctx.threads());
  int64_t chunks = (tiles + chunk - 1) / chunk;
  if (chunks >= threads && chunks < 4 * threads)
    chunks = std::min(tiles, (chunks + threads - 1) / threads * threads);
  p->chunk = (tiles + chunks - 1) / chunks;
  p->chunks = (tiles + p->chunk - 1) / p->chunk;
  p->column_parts = std::clamp<int64_t>((threads + p->chunks - 1) / p->chunks, 1, p->m16 / 16);
  p->threads = static_cast<int>(std::min<int64_t>(threads, p->chunks * p->column_parts));
  p->v_floats = static_cast<size_t>(kPositions * p->chunk * p->c);
  p->m_floats = static_cast<size_t>(kPositions * p->chunk * p->m16);
  p->per_thread = dnnl_adapter::align64(p->v_floats * sizeof(float)) +
                  dnnl_adapter::align64(p->m_floats * sizeof(float));
  ctx.request_scratch(p->per_thread * static_cast<size_t>(p->threads));

  // The transformed weights, once per session: every plan of this node (a new input shape)
  // shares them through the memo.
  std::string key = "winograd weights";
  const uintptr_t at = reinterpret_cast<uintptr_t>(w.raw());
  key.append(reinterpret_cast<const char*>(&at), sizeof at);
  if (NodeMemo* memo = ctx.memo()) p->u = std::static_pointer_cast<const Tensor>(memo->find(key));
  if (!p->u) {
    p->u = transform_weights(w.data<float>(), p->m, p->c, p->m16);
    if (NodeMemo* memo = ctx.memo()) memo->keep(key, std::const_pointer_cast<Tensor>(p->u));
  }
  return p;
}

void run_winograd_conv(const WinogradConv& p, const float* x, const float* bias,
                       const float* residual, float* y, void* scratch) {
  const int64_t tiles = p.n * static_cast<int64_t>(p.origins.size());
  const int64_t blocks = p.m16 / 16, items = p.chunks * p.column_parts;
  auto item = [&](int64_t i, int thread) {
    char* mine = static_cast<char*>(scratch) + static_cast<size_t>(thread) * p.per_thread;
    float* v = reinterpret_cast<float*>(mine);
    float* m = reinterpret_cast<float*>(mine + dnnl_adapter::align64(p.v_floats * sizeof(float)));
    const int64_t first = i / p.column_parts * p.chunk, part = i % p.column_parts;
    run_chunk(p, first, std::min(p.chunk, tiles - first), blocks * part / p.column_parts,
              blocks * (part + 1) / p.column_parts, x, bias, residual, y, v, m);
  };
  if (p.threads > 1) {
#pragma omp parallel for num_threads(p.threads) schedule(static)
    for (int64_t i = 0; i < items; ++i) item(i, omp_get_thread_num());
  } else {
    for (int64_t i = 0; i < items; ++i) item(i, 0);
  }
}

}  // namespace volt
