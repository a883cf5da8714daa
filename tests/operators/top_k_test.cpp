// TopK's selection against a stable sort of each row written here: ties (values drawn from a
// few levels) keep the lower index first, NaNs come after every number, on the last axis and on
// an inner one, largest and smallest, k from 0 to the whole axis, rows enough to run in parallel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

struct TopKResult {
  std::vector<float> values;
  std::vector<int64_t> indices;
};

TopKResult run_top_k(const std::vector<float>& x, const Shape& shape, int64_t axis, int64_t k,
                     bool largest) {
  ModelBuilder b(11);
  b.input("x", 1, shape).output_any("values", 1).output_any("indices", 7);
  b.initializer_i64("k", {1}, {k});
  b.node("TopK", {"x", "k"}, {"values", "indices"}, [&](onnx::NodeProto& n) {
    ModelBuilder::set_int(n, "axis", axis);
    ModelBuilder::set_int(n, "largest", largest);
  });
  const std::string bytes = b.bytes();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  const auto out = s.run({{"x", Tensor::from(x, shape)}});
  const Tensor &v = out[0].tensor(), &i = out[1].tensor();
  return {std::vector<float>(v.data<float>(), v.data<float>() + v.numel()),
          std::vector<int64_t>(i.data<int64_t>(), i.data<int64_t>() + i.numel())};
}

TopKResult stable_sorted(const std::vector<float>& x, const Shape& shape, int64_t axis, int64_t k,
                         bool largest) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t n = shape[static_cast<size_t>(axis)];
  TopKResult r;
  r.values.resize(static_cast<size_t>(outer * k * inner));
  r.indices.resize(r.values.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return x[static_cast<size_t>((o * n + j) * inner + i)]; };
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        if (std::isnan(at(a)) || std::isnan(at(b))) return !std::isnan(at(a)) && std::isnan(at(b));
        return largest ? at(a) > at(b) : at(a) < at(b);
      });
      for (int64_t j = 0; j < k; ++j) {
        const size_t to = static_cast<size_t>((o * k + j) * inner + i);
        r.values[to] = at(order[static_cast<size_t>(j)]);
        r.indices[to] = order[static_cast<size_t>(j)];
      }
    }
  return r;
}

TEST(TopK, MatchesAStableSortWithTiesAndNaNs) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> level(0, 9);
  for (const auto& [shape, axis] :
       std::vector<std::pair<Shape, int64_t>>{{{40, 500}, 1}, {{3, 200, 5}, 1}, {{600, 7}, 0}}) {
    std::vector<float> x(static_cast<size_t>(numel_of(shape)));
    for (float& v : x) v = static_cast<float>(level(rng)) / 4;
    x[3] = x[17] = std::numeric_limits<float>::quiet_NaN();
    const int64_t n = shape[static_cast<size_t>(axis)];
    // (k up to n / 8 selects by a heap, larger k by nth_element.)
    for (int64_t k : {int64_t{0}, int64_t{1}, n / 50, n / 8, n / 3, n})
      for (bool largest : {true, false}) {
        const TopKResult got = run_top_k(x, shape, axis, k, largest),
                         want = stable_sorted(x, shape, axis, k, largest);
        EXPECT_EQ(got.indices, want.indices)
            << "axis " << axis << " k " << k << " largest " << largest;
        ASSERT_EQ(got.values.size(), want.values.size());
        for (size_t i = 0; i < got.values.size(); ++i)
          EXPECT_TRUE(got.values[i] == want.values[i] ||
                      (std::isnan(got.values[i]) && std::isnan(want.values[i])));
      }
  }
}

}  // namespace
}  // namespace volt
