// MatMul and Gemm on constant weights, which the kernel packs once into the layout its gemm reads
// fastest (on AVX2: rows padded past N where N is a multiple of 64, transposed where K <= N for
// products of 32 rows or more, as oneDNN prefers otherwise): against the product written out in
// float64, for products of 1, 8 and 40 rows, weights of every such kind, and a second row count
// in one session (a second plan reusing the packed copy).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::uniform_values;

TEST(ConstantWeightsProduct, MatchesTheSumForEveryPackedLayout) {
  std::mt19937 rng(51);
  struct Case {
    int64_t k, n;
  };
  // N a multiple of 64 (padded rows) with K above and below it; N not (transposed or as oneDNN
  // lays them out); N of one.
  const std::vector<Case> cases = {{64, 128}, {200, 64}, {37, 192}, {64, 100}, {150, 70}, {16, 1}};
  for (const Case& c : cases)
    for (bool gemm : {false, true}) {
      SCOPED_TRACE(std::string(gemm ? "Gemm transB" : "MatMul") + " K " + std::to_string(c.k) +
                   " N " + std::to_string(c.n));
      const std::vector<float> w = uniform_values(rng, static_cast<size_t>(c.k * c.n));
      const std::vector<float> bias = uniform_values(rng, static_cast<size_t>(c.n));
      ModelBuilder b;
      b.input("x", 1, {-1, c.k}).output("y", 1, {-1, c.n});
      if (gemm) {  // W stored [N, K]
        std::vector<float> wt(w.size());
        for (int64_t i = 0; i < c.k; ++i)
          for (int64_t j = 0; j < c.n; ++j) wt[j * c.k + i] = w[i * c.n + j];
        b.initializer("W", {c.n, c.k}, wt).initializer("B", {c.n}, bias);
        b.node("Gemm", {"x", "W", "B"}, {"y"},
               [](auto& n) { ModelBuilder::set_int(n, "transB", 1); });
      } else {
        b.initializer("W", {c.k, c.n}, w);
        b.node("MatMul", {"x", "W"}, {"y"});
      }
      const std::string bytes = b.bytes();
      Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
      for (int64_t rows : {40, 1, 8, 40}) {
        Tensor x = Tensor::empty(DType::Float, {rows, c.k});
        const std::vector<float> xs = uniform_values(rng, static_cast<size_t>(rows * c.k));
        std::copy(xs.begin(), xs.end(), x.data<float>());
        const Tensor y = s.run({{"x", x}})[0].tensor();
        ASSERT_EQ(y.shape(), (Shape{rows, c.n}));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < c.n; ++j) {
            double sum = gemm ? bias[j] : 0.0;
            for (int64_t i = 0; i < c.k; ++i)
              sum += static_cast<double>(xs[r * c.k + i]) * w[i * c.n + j];
            // Sums of up to 200 products of values in [-1, 1], in fp32.
            ASSERT_NEAR(y.data<float>()[r * c.n + j], sum, 1e-4 * (1 + std::abs(sum)))
                << "row " << r << " of " << rows << ", column " << j;
          }
      }
    }
}

}  // namespace
}  // namespace volt
