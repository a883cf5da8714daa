// Fuzz target: CSR construction from arbitrary arrays, then, for the ones accepted, densify,
// round-trip and the sparse product against the dense one. Rejections must be volt::Error; an
// accepted matrix must go through all of it without a sanitizer report and match.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "fuzz_input.hpp"
#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace {

// y = x · W for x [?, cols] and a fixed W [cols, 3], one session per column count.
const volt::Session& matmul_session(int64_t cols) {
  static std::map<int64_t, std::unique_ptr<volt::Session>> sessions;
  auto& s = sessions[cols];
  if (!s) {
    volt::testing::ModelBuilder b;
    b.input("x", 1, {-1, cols}).output_any("y", 1).node("MatMul", {"x", "W"}, {"y"});
    std::vector<float> w(static_cast<size_t>(cols * 3));
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) - 3.0f;
    b.initializer("W", {cols, 3}, w);
    const std::string bytes = b.bytes();
    volt::SessionOptions o;
    o.threads = 1;
    s = std::make_unique<volt::Session>(volt::Session::from_bytes(bytes.data(), bytes.size(), o));
  }
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volt::fuzz::ByteReader in(data, size);
  // Sizes mostly small and sometimes hostile (negative, huge).
  auto size_value = [&]() -> int64_t {
    const uint8_t k = in.byte();
    if (k == 0xff) return -static_cast<int64_t>(in.u32());
    if (k == 0xfe) return static_cast<int64_t>(in.u32()) << 31;
    return k % 24;
  };
  const int64_t rows = size_value(), cols = size_value(), nnz = size_value();
  std::vector<int64_t> offsets(rows >= 0 && rows < 64 ? static_cast<size_t>(rows) + 1 : 1);
  for (auto& o : offsets) o = static_cast<int8_t>(in.byte());
  if (in.byte() & 1) {  // usually well-formed offsets, so the deeper checks get exercised
    int64_t acc = 0;
    for (size_t r = 0; r < offsets.size(); ++r) {
      offsets[r] = acc;
      acc = std::min<int64_t>(acc + in.byte() % 4, std::max<int64_t>(nnz, 0));
    }
    offsets.back() = nnz;
  }
  const size_t n = nnz >= 0 && nnz < 64 ? static_cast<size_t>(nnz) : 0;
  std::vector<int64_t> cols_idx(n);
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) {
    cols_idx[i] = static_cast<int8_t>(in.byte());
    values[i] = static_cast<float>(static_cast<int8_t>(in.byte())) / 8.0f;
  }
  volt::CsrTensor csr;
  try {
    // The arrays are only as long as the sizes they were made for: a positive row count past
    // them would be the caller reading out of bounds, which no API can detect.
    if (rows >= 64) return 0;
    if (static_cast<size_t>(std::max<int64_t>(nnz, 0)) != n) {
      // Sizes the arrays do not have: the constructor must refuse before reading past them,
      // which it can only do when the offsets already disagree; keep to arrays we own.
      return 0;
    }
    csr = volt::CsrTensor::copy_of(volt::DType::Float, rows, cols, nnz, offsets.data(),
                                   cols_idx.data(), values.data());
  } catch (const volt::Error&) {
    return 0;
  }
  // Accepted matrices may be huge and empty (cols = 2^40, nnz = 0): only small ones are
  // densified and multiplied here.
  if (csr.cols() > 4096 || csr.rows() * csr.cols() > (1 << 16)) return 0;
  const volt::Tensor dense = csr.to_dense();
  const volt::CsrTensor back = volt::CsrTensor::from_dense(dense);
  const volt::Tensor again = back.to_dense();
  if (std::memcmp(dense.raw(), again.raw(), dense.nbytes()) != 0) std::abort();
  if (cols == 0) return 0;
  try {
    const volt::Session& s = matmul_session(cols);
    const volt::Tensor y_sparse = s.run({{"x", csr}})[0].tensor();
    const volt::Tensor y_dense = s.run({{"x", dense}})[0].tensor();
    for (int64_t i = 0; i < y_dense.numel(); ++i) {
      const float a = y_sparse.data<float>()[i], b = y_dense.data<float>()[i];
      if (std::fabs(a - b) > 1e-4f * (1.0f + std::fabs(b))) std::abort();
    }
  } catch (const volt::Error&) {
    std::abort();  // a valid CSR matrix must run
  }
  return 0;
}
