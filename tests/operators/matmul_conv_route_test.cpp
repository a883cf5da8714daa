// MatMul on constant weights with its fused epilogue (bias, ReLU or LeakyRelu, a residual of Y's
// shape or one broadcast over the rows), in the plan of a session's first shape and in the plans
// for the shapes after it. In the first, without AVX-512 the kernel runs it as a 1x1 convolution
// over channels-last rows (ConvRoute in cpu/matmul.cpp), with it as oneDNN's matmul; in the later
// ones, with AVX-512 on volt's packed kernel (cpu/packed_product.hpp: row blocks of 12 whole and
// cut, columns in blocks of 32 whole and cut, depths past its 256-row pass), without it on oneDNN's
// gemm. ctest runs this file a second time with oneDNN held to AVX2, so that every route is
// checked on an AVX-512 machine. Against the product written out in float64, for 1 to 300 rows
// (A of rank 3, flattened to rows), weights of 8 to 200 columns; and Gemm.
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

TEST(MatMulOnConstantWeights, FusedEpiloguesMatchTheSumAtEachShape) {
  std::mt19937 rng(77);
  struct Case {
    int64_t rows, k, n;
  };
  enum class Residual { None, Same, Row };
  for (const Case c : {Case{1, 64, 96}, Case{7, 200, 8}, Case{300, 96, 200}})
    for (const Residual residual : {Residual::None, Residual::Same, Residual::Row})
      for (const int epilogue : {0, 1, 2}) {  // none; bias and ReLU; bias and LeakyRelu
        const bool bias_relu = epilogue == 1, bias_leaky = epilogue == 2;
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " K " + std::to_string(c.k) + " N " +
                     std::to_string(c.n) + " residual " +
                     std::to_string(static_cast<int>(residual)) + (bias_relu ? " bias+relu" : "") +
                     (bias_leaky ? " bias+leakyrelu" : ""));
        const int64_t batch = c.rows == 300 ? 3 : 1;
        const std::vector<float> w = uniform_values(rng, static_cast<size_t>(c.k * c.n));
        const std::vector<float> bias = uniform_values(rng, static_cast<size_t>(c.n));
        const std::vector<float> row = uniform_values(rng, static_cast<size_t>(c.n));
        ModelBuilder b;
        b.input("x", 1, {batch, -1, c.k}).output_any("y", 1);
        b.initializer("W", {c.k, c.n}, w).initializer("B", {c.n}, bias);
        if (residual == Residual::Same) b.input("r", 1, {batch, -1, c.n});
        if (residual == Residual::Row) b.initializer("R", {c.n}, row);
        std::string last = "p";
        b.node("MatMul", {"x", "W"}, {last});
        if (bias_relu) {
          b.node("Add", {last, "B"}, {"pb"}).node("Relu", {"pb"}, {"pr"});
          last = "pr";
        }
        if (bias_leaky) {
          b.node("Add", {last, "B"}, {"pb"}).node("LeakyRelu", {"pb"}, {"pr"}, [](auto& n) {
            ModelBuilder::set_float(n, "alpha", 0.1f);
          });
          last = "pr";
        }
        if (residual != Residual::None)
          b.node("Add", {last, residual == Residual::Same ? "r" : "R"}, {"y"});
        else
          b.node("Identity", {last}, {"y"});
        const std::string bytes = b.bytes();
        Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
        // The case's rows first (a plan for one shape), then others (plans for several).
        for (const int64_t per : {c.rows / batch, int64_t{13}, int64_t{1}, int64_t{37}}) {
          SCOPED_TRACE("rows per batch " + std::to_string(per));
          const int64_t rows = batch * per;
          const std::vector<float> xs = uniform_values(rng, static_cast<size_t>(rows * c.k));
          const std::vector<float> res = uniform_values(rng, static_cast<size_t>(rows * c.n));
          NamedValues feeds = {{"x", tensor_of(xs, {batch, per, c.k})}};
          if (residual == Residual::Same) feeds.push_back({"r", tensor_of(res, {batch, per, c.n})});
          const Tensor y = s.run(feeds)[0].tensor();
          ASSERT_EQ(y.shape(), (Shape{batch, per, c.n}));
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < c.n; ++j) {
              double sum = 0.0;
              for (int64_t i = 0; i < c.k; ++i)
                sum += static_cast<double>(xs[r * c.k + i]) * w[i * c.n + j];
              if (bias_relu) sum = std::max(0.0, sum + bias[j]);
              if (bias_leaky) sum = sum + bias[j] < 0 ? 0.1 * (sum + bias[j]) : sum + bias[j];
              if (residual == Residual::Same) sum += res[r * c.n + j];
              if (residual == Residual::Row) sum += row[j];
              // Sums of up to 200 products of values in [-1, 1], in fp32.
              ASSERT_NEAR(y.data<float>()[r * c.n + j], sum, 1e-4 * (1 + std::abs(sum)))
                  << "row " << r << ", column " << j;
            }
        }
      }
}

// Gemm the same way: B as stored or transposed, C absent or one row (the bias), then ReLU.
TEST(MatMulOnConstantWeights, GemmsMatchTheSumAtEachShape) {
  std::mt19937 rng(78);
  for (const int64_t first : {1, 64})
    for (const bool trans_b : {false, true})
      for (const bool with_c : {false, true}) {
        SCOPED_TRACE("first rows " + std::to_string(first) + (trans_b ? " transB" : "") +
                     (with_c ? " C" : ""));
        const int64_t k = 784, n = 128;
        const std::vector<float> w = uniform_values(rng, static_cast<size_t>(k * n));  // [K, N]
        const std::vector<float> c = uniform_values(rng, static_cast<size_t>(n));
        std::vector<float> stored = w;
        if (trans_b)
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < n; ++j) stored[j * k + i] = w[i * n + j];
        ModelBuilder b;
        b.input("x", 1, {-1, k}).output_any("y", 1);
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
        for (const int64_t rows : {first, int64_t{3}, int64_t{25}}) {
          SCOPED_TRACE("rows " + std::to_string(rows));
          const std::vector<float> xs = uniform_values(rng, static_cast<size_t>(rows * k));
          const Tensor y = s.run({{"x", tensor_of(xs, {rows, k})}})[0].tensor();
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
}

}  // namespace
}  // namespace volt
