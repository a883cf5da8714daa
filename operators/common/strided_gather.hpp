// strided_gather: a contiguous output from a strided view of an input, the one copy loop behind
// Slice, Split and Transpose on the CPU. Output axes that the input also holds contiguously are
// merged first, so that a channel Slice of an N x C x H x W tensor (ShuffleNet's split) is one
// block copy per image rather than a row of W elements per channel and row, each with its own
// index arithmetic (28-element rows: 35 us for a 180 KB slice, against 6 us as one block).
// Copies whose last output axis is a few strided channels (an image's channels-first planes
// into channels-last pixels) interleave those planes instead, one small transpose per piece.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "operators/common/parallel.hpp"

namespace volt {

// Output `shape` (row-major, contiguous in `dst`) and the input stride of each output axis:
// dst[i0, i1, ...] = src[i0 * strides[0] + i1 * strides[1] + ...]. Merges axis d into d + 1
// where stepping d is stepping d + 1 its whole length (strides[d] == strides[d+1] * shape[d+1])
// and drops axes of length 1; at least one axis remains.
inline void merge_contiguous_axes(std::vector<int64_t>& shape, std::vector<int64_t>& strides) {
  size_t kept = 0;  // (in place: no allocation per run)
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (kept > 0 && strides[kept - 1] == strides[d] * shape[d]) {
      shape[kept - 1] *= shape[d];
      strides[kept - 1] = strides[d];
      continue;
    }
    shape[kept] = shape[d];
    strides[kept] = strides[d];
    ++kept;
  }
  shape.resize(std::max<size_t>(kept, 1), 1);
  strides.resize(std::max<size_t>(kept, 1), 1);
  if (kept == 0) shape[0] = strides[0] = 1;
}

// Whether reading the input along output `shape` at `strides` is one contiguous run of it, in
// order: what strided_gather copies as one block, and what Slice, Gather and Transpose output
// as a view instead (ContiguousView).
inline bool is_one_run(std::vector<int64_t> shape, std::vector<int64_t> strides) {
  merge_contiguous_axes(shape, strides);
  return shape.size() == 1 && (strides[0] == 1 || shape[0] == 1);
}

// dst[j * channels + c] = src[c * stride + j] for j < len and c < channels (2 to 4), elements of
// 4 bytes: compiled for AVX-512 and AVX2 too (strided_gather.cpp).
void interleave_4byte(const void* src, void* dst, int64_t len, int64_t stride, int64_t channels);

// dst[r * dst_stride + c] = src[c * src_stride + r] for r < rows and c < cols, elements of 4
// bytes, in tiles (a transpose): compiled for AVX-512 and AVX2 too (strided_gather.cpp).
void transpose_4byte(const void* src, void* dst, int64_t rows, int64_t cols, int64_t src_stride,
                     int64_t dst_stride);

// strided_gather on axes merge_contiguous_axes has already merged (non-empty, none of length 0):
// for a copy made many times with one geometry (PreparedReorder), without the two vectors per call.
template <class T>
void strided_gather_merged(const T* src, T* dst, const std::vector<int64_t>& shape,
                           const std::vector<int64_t>& strides) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t r = shape.size();
  const int64_t inner = shape[r - 1], inner_stride = strides[r - 1];
  const int64_t rows = n / inner;
  // The input offset of index `i` over the first `axes` output axes.
  auto offset_of = [&](int64_t i, size_t axes) {
    int64_t off = 0;
    for (size_t d = axes; d-- > 0;) {
      off += (i % shape[d]) * strides[d];
      i /= shape[d];
    }
    return off;
  };
  auto row_offset = [&](int64_t row) { return offset_of(row, r - 1); };
  // Parallel once there is enough to copy: over rows where there are several per thread, else
  // over pieces of the rows (a whole-image block).
  constexpr int64_t kParallelElements = 32768, kPiece = 16384;
  const bool parallel = n > kParallelElements;
  // A few strided channels after an axis the input holds contiguously: rows of `inner` elements
  // each gathered from `inner` planes ran element by element; as one transpose per piece of the
  // contiguous axis, 1x3x224x224 into channels-last took 17 us on two threads, oneDNN's reorder
  // 46 us (8x3x224x224: 311 and 398 us).
  if constexpr (sizeof(T) == 4) {
    if (r >= 2 && inner >= 2 && inner <= 4 && inner_stride != 1 && strides[r - 2] == 1) {
      constexpr int64_t kInterleavePiece = 4096;
      const int64_t len = shape[r - 2], outer = rows / len;
      const int64_t pieces = (len + kInterleavePiece - 1) / kInterleavePiece;
      parallel_for(outer * pieces, parallel, [&](int64_t p) {
        const int64_t q = p / pieces, j = (p % pieces) * kInterleavePiece;
        interleave_4byte(src + offset_of(q, r - 2) + j, dst + (q * len + j) * inner,
                         std::min(kInterleavePiece, len - j), inner_stride, inner);
      });
      return;
    }
    // More of them: a transpose per outer index (attention's K^T as plain rows), in tiles
    // rather than one strided read per element, in pieces of rows and columns across the threads.
    if (r >= 2 && inner > 4 && inner_stride != 1 && strides[r - 2] == 1) {
      constexpr int64_t kPieceRows = 1024, kPieceColumns = 256;
      const int64_t len = shape[r - 2], outer = rows / len;
      const int64_t row_pieces = (len + kPieceRows - 1) / kPieceRows,
                    column_pieces = (inner + kPieceColumns - 1) / kPieceColumns;
      parallel_for(outer * row_pieces * column_pieces, parallel, [&](int64_t p) {
        const int64_t q = p / (row_pieces * column_pieces),
                      r0 = p / column_pieces % row_pieces * kPieceRows,
                      c0 = p % column_pieces * kPieceColumns;
        transpose_4byte(src + offset_of(q, r - 2) + r0 + c0 * inner_stride,
                        dst + (q * len + r0) * inner + c0, std::min(kPieceRows, len - r0),
                        std::min(kPieceColumns, inner - c0), inner_stride, inner);
      });
      return;
    }
  }
  if (inner_stride == 1 && rows < 8 && parallel) {
    const int64_t pieces_per_row = (inner + kPiece - 1) / kPiece;
    parallel_for(rows * pieces_per_row, true, [&](int64_t p) {
      const int64_t row = p / pieces_per_row, lo = (p % pieces_per_row) * kPiece;
      const int64_t len = std::min(kPiece, inner - lo);
      std::copy_n(src + row_offset(row) + lo, len, dst + row * inner + lo);
    });
    return;
  }
  parallel_for(rows, parallel, [&](int64_t row) {
    const T* s = src + row_offset(row);
    T* o = dst + row * inner;
    if (inner_stride == 1) {
      std::copy_n(s, inner, o);
      return;
    }
    for (int64_t i = 0; i < inner; ++i) o[i] = s[i * inner_stride];
  });
}

template <class T>
void strided_gather(const T* src, T* dst, std::vector<int64_t> shape,
                    std::vector<int64_t> strides) {
  for (int64_t d : shape)
    if (d == 0) return;
  merge_contiguous_axes(shape, strides);
  strided_gather_merged(src, dst, shape, strides);
}

}  // namespace volt
