// Float Sum and Mean reductions over the last axes (the contiguous-run path) and over inner
// blocks (the row-vector path) against sums in long double, for lengths around the eight-lane
// split and for a global average pool's shape; LogSumExp over the last axis (its vector path)
// against long double, with infinities and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

TEST(Reduce, SumsAndMeansOverTrailingAndInnerAxesMatchLongDoubleSums) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  for (const Case& c : std::vector<Case>{{{1, 1280, 7, 7}, {2, 3}},
                                         {{3, 5, 7}, {2}},
                                         {{2, 3, 8}, {1, 2}},
                                         {{4, 17}, {1}},
                                         {{2, 9, 3}, {1}},
                                         {{5, 1}, {1}}})
    for (const std::string op : {"ReduceSum", "ReduceMean"}) {
      ModelBuilder b(13);
      b.input_any("x", 1).output_any("y", 1);
      if (op == "ReduceSum") {
        b.initializer_i64("axes", {static_cast<int64_t>(c.axes.size())}, c.axes);
        b.node(op, {"x", "axes"}, {"y"}, [](auto& n) { ModelBuilder::set_int(n, "keepdims", 0); });
      } else {
        b.node(op, {"x"}, {"y"}, [&](auto& n) {
          ModelBuilder::set_ints(n, "axes", c.axes);
          ModelBuilder::set_int(n, "keepdims", 0);
        });
      }
      const std::string bytes = b.bytes();
      Session s = Session::from_bytes(bytes.data(), bytes.size());
      Tensor x = Tensor::empty(DType::Float, c.shape);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
      const Tensor y = s.run({{"x", x}})[0].tensor();
      // x as [outer, reduced, inner] (the axes are adjacent in every case).
      int64_t outer = 1, count = 1, inner = 1;
      for (size_t d = 0; d < c.shape.size(); ++d) {
        const bool reduced = std::find(c.axes.begin(), c.axes.end(), d) != c.axes.end();
        (reduced ? count : (static_cast<int64_t>(d) < c.axes.front() ? outer : inner)) *=
            c.shape[d];
      }
      ASSERT_EQ(y.numel(), outer * inner) << op;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          long double sum = 0;
          for (int64_t r = 0; r < count; ++r) sum += x.data<float>()[(o * count + r) * inner + i];
          if (op == "ReduceMean") sum /= count;
          // Summed in double (any order): the float result is the exact sum rounded once, up to
          // one ulp where double's rounding lands next to a float boundary.
          const float want = static_cast<float>(sum);
          EXPECT_NEAR(y.data<float>()[o * inner + i], want, std::abs(want) * 1.2e-7f + 1e-30f)
              << op << " " << shape_str(c.shape) << " at " << o << "," << i;
        }
    }
}

TEST(Reduce, LogSumExpOverTheLastAxisWithinAMillionthOfLongDouble) {
  std::mt19937 rng(28);
  std::uniform_real_distribution<float> u(-40.0f, 40.0f);
  const float inf = std::numeric_limits<float>::infinity();
  // Lengths around the lanes (8, 16) and the blocks of 1024; then a row holding +inf, one
  // holding a NaN and one of -inf only.
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{17}, int64_t{1025}, int64_t{32000}}) {
    const int64_t rows = 5;
    ModelBuilder b(13);
    b.input("x", 1, {rows, n}).output_any("y", 1);
    b.node("ReduceLogSumExp", {"x"}, {"y"}, [](auto& node) {
      ModelBuilder::set_ints(node, "axes", {1});
      ModelBuilder::set_int(node, "keepdims", 0);
    });
    const std::string bytes = b.bytes();
    Session s = Session::from_bytes(bytes.data(), bytes.size());
    Tensor x = Tensor::empty(DType::Float, {rows, n});
    float* px = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) px[i] = u(rng);
    px[2 * n + n - 1] = inf;
    px[3 * n + n / 2] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < n; ++i) px[4 * n + i] = -inf;
    const Tensor y = s.run({{"x", x}})[0].tensor();
    ASSERT_EQ(y.numel(), rows);
    for (int64_t r = 0; r < 2; ++r) {
      long double m = px[r * n], sum = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max<long double>(m, px[r * n + i]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<long double>(px[r * n + i]) - m);
      const double want = static_cast<double>(m + std::log(sum));
      EXPECT_NEAR(y.data<float>()[r], want, 1e-6 * std::max(1.0, std::abs(want))) << n << " " << r;
    }
    // As the general loop computes it: exp(inf - inf) and exp(-inf + inf) are NaN.
    EXPECT_TRUE(std::isnan(y.data<float>()[2])) << n;
    EXPECT_TRUE(std::isnan(y.data<float>()[3])) << n;
    EXPECT_TRUE(std::isnan(y.data<float>()[4])) << n;
  }
}

}  // namespace
}  // namespace volt
