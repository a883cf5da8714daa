// MatMul on constant weights with its fused epilogue (bias, ReLU, a residual of Y's shape or one
// broadcast over the rows) in plans of one shape: without AVX-512 the kernel runs it as a 1x1
// convolution over channels-last rows (ConvRoute in cpu/matmul.cpp), with it as oneDNN's matmul;
// ctest runs this file a second time with oneDNN held to AVX2, so that both routes are checked on
// an AVX-512 machine. Against the product written out in float64, for 1, 7 and 300 rows (A of
// rank 3, flattened to rows), weights of 8 to 200 columns; and Gemm.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::uniform_values;

TEST(MatMulOnConstantWeights, FusedEpiloguesMatchTheSumInPlansOfOneShape) {
  std::mt19937 rng(77);
  struct Case {
    int64_t rows, k, n;
  };
  enum class Residual { None, Same, Row };
  for (const Case c : {Case{1, 64, 96}, Case{7, 200, 8}, Case{300, 96, 200}})
    for (const Residual residual : {Residual::None, Residual::Same, Residual::Row})
      for (const bool bias_relu : {false, true}) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " K " + std::to_string(c.k) + " N " +
                     std::to_string(c.n) + " residual " +
                     std::to_string(static_cast<int>(residual)) + (bias_relu ? " bias+relu" : ""));
        const int64_t batch = c.rows == 300 ? 3 : 1, per = c.rows / batch;
        const std::vector<float> w = uniform_values(rng, static_cast<size_t>(c.k * c.n));
        const std::vector<float> bias = uniform_values(rng, static_cast<size_t>(c.n));
        const int64_t residual_size = residual == Residual::Same ? c.rows * c.n : c.n;
        const std::vector<float> res = uniform_values(rng, static_cast<size_t>(residual_size));
        ModelBuilder b;
        b.input("x", 1, {batch, per, c.k}).output("y", 1, {batch, per, c.n});
        b.initializer("W", {c.k, c.n}, w).initializer("B", {c.n}, bias);
        if (residual == Residual::Same) b.input("r", 1, {batch, per, c.n});
        if (residual == Residual::Row) b.initializer("R", {c.n}, res);
        std::string last = "p";
        b.node("MatMul", {"x", "W"}, {last});
        if (bias_relu) {
          b.node("Add", {last, "B"}, {"pb"}).node("Relu", {"pb"}, {"pr"});
          last = "pr";
        }
        if (residual != Residual::None)
          b.node("Add", {last, residual == Residual::Same ? "r" : "R"}, {"y"});
        else
          b.node("Identity", {last}, {"y"});
        const std::string bytes = b.bytes();
        Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
        const std::vector<float> xs = uniform_values(rng, static_cast<size_t>(c.rows * c.k));
        Tensor x = Tensor::empty(DType::Float, {batch, per, c.k});
        std::copy(xs.begin(), xs.end(), x.data<float>());
        NamedValues feeds = {{"x", x}};
        if (residual == Residual::Same) {
          Tensor r = Tensor::empty(DType::Float, {batch, per, c.n});
          std::copy(res.begin(), res.end(), r.data<float>());
          feeds.push_back({"r", r});
        }
        const Tensor y = s.run(feeds)[0].tensor();
        ASSERT_EQ(y.shape(), (Shape{batch, per, c.n}));
        for (int64_t r = 0; r < c.rows; ++r)
          for (int64_t j = 0; j < c.n; ++j) {
            double sum = 0.0;
            for (int64_t i = 0; i < c.k; ++i)
              sum += static_cast<double>(xs[r * c.k + i]) * w[i * c.n + j];
            if (bias_relu) sum = std::max(0.0, sum + bias[j]);
            if (residual == Residual::Same) sum += res[r * c.n + j];
            if (residual == Residual::Row) sum += res[j];
            // Sums of up to 200 products of values in [-1, 1], in fp32.
            ASSERT_NEAR(y.data<float>()[r * c.n + j], sum, 1e-4 * (1 + std::abs(sum)))
                << "row " << r << ", column " << j;
          }
      }
}

// Gemm the same way: B as stored or transposed, C absent or one row (the bias), then ReLU.
TEST(MatMulOnConstantWeights, GemmsMatchTheSumInPlansOfOneShape) {
  std::mt19937 rng(78);
  for (const int64_t rows : {1, 64})
    for (const bool trans_b : {false, true})
      for (const bool with_c : {false, true}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + (trans_b ? " transB" : "") +
                     (with_c ? " C" : ""));
        const int64_t k = 784, n = 128;
        const std::vector<float> w = uniform_values(rng, static_cast<size_t>(k * n));  // [K, N]
        const std::vector<float> c = uniform_values(rng, static_cast<size_t>(n));
        std::vector<float> stored = w;
        if (trans_b)
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < n; ++j) stored[j * k + i] = w[i * n + j];
        ModelBuilder b;
        b.input("x", 1, {rows, k}).output("y", 1, {rows, n});
        b.initializer("W", trans_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n},
                      stored);
        std::vector<std::string> ins = {"x", "W"};
        if (with_c) {
          b.initializer("C", {n}, c);
          ins.push_back("C");
        }
        b.node("Gemm", ins, {"g"}, [&](auto& node) {
          if (trans_b) ModelBuilder::set_int(node, "transB", 1);
        });
        b.node("Relu", {"g"}, {"y"});
        const std::string bytes = b.bytes();
        Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
        const std::vector<float> xs = uniform_values(rng, static_cast<size_t>(rows * k));
        Tensor x = Tensor::empty(DType::Float, {rows, k});
        std::copy(xs.begin(), xs.end(), x.data<float>());
        const Tensor y = s.run({{"x", x}})[0].tensor();
        ASSERT_EQ(y.shape(), (Shape{rows, n}));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < n; ++j) {
            double sum = with_c ? c[j] : 0.0;
            for (int64_t i = 0; i < k; ++i)
              sum += static_cast<double>(xs[r * k + i]) * w[i * n + j];
            sum = std::max(0.0, sum);
            // Sums of 784 products of values in [-1, 1], in fp32.
            ASSERT_NEAR(y.data<float>()[r * n + j], sum, 2e-4 * (1 + std::abs(sum)))
                << "row " << r << ", column " << j;
          }
      }
}

}  // namespace
}  // namespace volt
