// Products with constant weights in plans for several input shapes: with AVX-512 they run volt's
// register-blocked kernel on weights packed once per session (cpu/packed_product.hpp), bias,
// activation and residual applied in registers; without it oneDNN's gemm. Each new number of
// rows (1 to 100: row blocks of 12 whole and cut) against the product written out in float64:
// MatMul with a bias and ReLU or Sigmoid and a residual of Y's shape or one broadcast over the
// rows, weights of 8 to 300 columns (blocks of 32 whole and cut) and depths past the kernel's
// 256-row pass; Gemm with B as stored or transposed and C absent or one row.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::uniform_values;

Tensor tensor_of(const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::empty(DType::Float, shape);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

TEST(PackedProduct, MatMulEpiloguesMatchTheSumAtEveryNewRowCount) {
  std::mt19937 rng(91);
  struct Case {
    int64_t k, n;
  };
  enum class Residual { None, Same, Row };
  for (const Case c : {Case{64, 96}, Case{300, 8}, Case{40, 300}})
    for (const Residual residual : {Residual::None, Residual::Same, Residual::Row})
      for (const char* activation : {"", "Relu", "Sigmoid"}) {
        SCOPED_TRACE("K " + std::to_string(c.k) + " N " + std::to_string(c.n) + " residual " +
                     std::to_string(static_cast<int>(residual)) + " " + activation);
        const std::vector<float> w = uniform_values(rng, static_cast<size_t>(c.k * c.n));
        const std::vector<float> bias = uniform_values(rng, static_cast<size_t>(c.n));
        const std::vector<float> row = uniform_values(rng, static_cast<size_t>(c.n));
        ModelBuilder b;
        b.input("x", 1, {1, -1, c.k});
        b.initializer("W", {c.k, c.n}, w).initializer("B", {c.n}, bias);
        if (residual == Residual::Same) b.input("r", 1, {1, -1, c.n});
        if (residual == Residual::Row) b.initializer("R", {c.n}, row);
        b.node("MatMul", {"x", "W"}, {"p"}).node("Add", {"p", "B"}, {"pb"});
        std::string last = "pb";
        if (*activation) {
          b.node(activation, {last}, {"act"});
          last = "act";
        }
        if (residual != Residual::None)
          b.node("Add", {last, residual == Residual::Same ? "r" : "R"}, {"y"});
        else
          b.node("Identity", {last}, {"y"});
        b.output_any("y", 1);
        const std::string bytes = b.bytes();
        Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
        for (const int64_t rows : {5, 1, 12, 13, 100, 37}) {
          SCOPED_TRACE("rows " + std::to_string(rows));
          const std::vector<float> xs = uniform_values(rng, static_cast<size_t>(rows * c.k));
          const std::vector<float> res = uniform_values(rng, static_cast<size_t>(rows * c.n));
          NamedValues feeds = {{"x", tensor_of(xs, {1, rows, c.k})}};
          if (residual == Residual::Same) feeds.push_back({"r", tensor_of(res, {1, rows, c.n})});
          const Tensor y = s.run(feeds)[0].tensor();
          ASSERT_EQ(y.shape(), (Shape{1, rows, c.n}));
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < c.n; ++j) {
              double sum = bias[j];
              for (int64_t i = 0; i < c.k; ++i)
                sum += static_cast<double>(xs[r * c.k + i]) * w[i * c.n + j];
              if (std::string(activation) == "Relu") sum = std::max(0.0, sum);
              if (std::string(activation) == "Sigmoid") sum = 1 / (1 + std::exp(-sum));
              if (residual == Residual::Same) sum += res[r * c.n + j];
              if (residual == Residual::Row) sum += row[j];
              // Sums of up to 300 products of values in [-1, 1], in fp32.
              ASSERT_NEAR(y.data<float>()[r * c.n + j], sum, 1e-4 * (1 + std::abs(sum)))
                  << "row " << r << ", column " << j;
            }
        }
      }
}

TEST(PackedProduct, GemmsMatchTheSumAtEveryNewRowCount) {
  std::mt19937 rng(92);
  for (const bool trans_b : {false, true})
    for (const bool with_c : {false, true}) {
      SCOPED_TRACE(std::string(trans_b ? "transB" : "") + (with_c ? " C" : ""));
      const int64_t k = 520, n = 70;
      const std::vector<float> w = uniform_values(rng, static_cast<size_t>(k * n));  // [K, N]
      const std::vector<float> c = uniform_values(rng, static_cast<size_t>(n));
      std::vector<float> stored = w;
      if (trans_b)
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < n; ++j) stored[j * k + i] = w[i * n + j];
      ModelBuilder b;
      b.input("x", 1, {-1, k});
      b.initializer("W", trans_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, stored);
      std::vector<std::string> ins = {"x", "W"};
      if (with_c) {
        b.initializer("C", {n}, c);
        ins.push_back("C");
      }
      b.node("Gemm", ins, {"y"}, [&](auto& node) {
        if (trans_b) ModelBuilder::set_int(node, "transB", 1);
      });
      b.output_any("y", 1);
      const std::string bytes = b.bytes();
      Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
      for (const int64_t rows : {3, 1, 25, 64}) {
        SCOPED_TRACE("rows " + std::to_string(rows));
        const std::vector<float> xs = uniform_values(rng, static_cast<size_t>(rows * k));
        const Tensor y = s.run({{"x", tensor_of(xs, {rows, k})}})[0].tensor();
        ASSERT_EQ(y.shape(), (Shape{rows, n}));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < n; ++j) {
            double sum = with_c ? c[j] : 0.0;
            for (int64_t i = 0; i < k; ++i)
              sum += static_cast<double>(xs[r * k + i]) * w[i * n + j];
            // Sums of 520 products of values in [-1, 1], in fp32.
            ASSERT_NEAR(y.data<float>()[r * n + j], sum, 2e-4 * (1 + std::abs(sum)))
                << "row " << r << ", column " << j;
          }
      }
    }
}

}  // namespace
}  // namespace volt
