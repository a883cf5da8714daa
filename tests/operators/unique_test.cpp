// Unique (slices sorted, equal runs grouped) against a plain definition: the distinct values
// by first occurrence, then sorted when asked; first indices, inverse indices and counts.
// Flat values with repeats and NaNs (which collapse into one, after every number), and
// slices along an axis.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

std::vector<Tensor> run_unique(const Tensor& x, int64_t sorted, int64_t axis) {
  ModelBuilder b(11);
  b.input("x", 1, x.shape());
  for (const char* o : {"y"}) b.output_any(o, 1);
  for (const char* o : {"first", "inverse", "counts"}) b.output_any(o, 7);
  b.node("Unique", {"x"}, {"y", "first", "inverse", "counts"}, [&](onnx::NodeProto& n) {
    ModelBuilder::set_int(n, "sorted", sorted);
    if (axis >= 0) ModelBuilder::set_int(n, "axis", axis);
  });
  const std::string bytes = b.bytes();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  std::vector<Tensor> out;
  for (const Value& v : s.run({{"x", x}})) out.push_back(v.tensor());
  return out;
}

std::vector<int64_t> ints(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

TEST(Unique, MatchesTheDefinition) {
  std::mt19937 rng(73);
  for (int64_t axis : {-1, 1}) {
    const Shape shape = axis < 0 ? Shape{3000} : Shape{2, 400, 3};
    Tensor x = Tensor::empty(DType::Float, shape);
    std::uniform_int_distribution<int> u(0, 40);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(u(rng) % 7);
    if (axis < 0) x.data<float>()[17] = x.data<float>()[2000] = NAN;
    const int64_t outer = axis < 0 ? 1 : shape[0], n = axis < 0 ? shape[0] : shape[1],
                  inner = axis < 0 ? 1 : shape[2];
    auto slice = [&](int64_t j) {
      std::vector<float> s;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) s.push_back(x.data<float>()[(o * n + j) * inner + i]);
      return s;
    };
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      for (size_t i = 0; i < a.size(); ++i)
        if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
      return true;
    };
    auto less = [](const std::vector<float>& a, const std::vector<float>& b) {
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) || std::isnan(b[i])) {
          if (std::isnan(a[i]) != std::isnan(b[i])) return std::isnan(b[i]);
          continue;
        }
        if (a[i] != b[i]) return a[i] < b[i];
      }
      return false;
    };
    // By first occurrence.
    std::vector<int64_t> first, counts, inverse;
    for (int64_t j = 0; j < n; ++j) {
      size_t g = 0;
      while (g < first.size() && !same(slice(first[g]), slice(j))) ++g;
      if (g == first.size()) first.push_back(j), counts.push_back(0);
      ++counts[g];
      inverse.push_back(static_cast<int64_t>(g));
    }
    for (int64_t sorted : {0, 1}) {
      std::vector<size_t> order(first.size());
      for (size_t g = 0; g < order.size(); ++g) order[g] = g;
      if (sorted)
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return less(slice(first[a]), slice(first[b]));
        });
      std::vector<int64_t> rank(order.size()), want_first, want_counts, want_inverse;
      for (size_t r = 0; r < order.size(); ++r) {
        rank[order[r]] = static_cast<int64_t>(r);
        want_first.push_back(first[order[r]]);
        want_counts.push_back(counts[order[r]]);
      }
      for (int64_t g : inverse) want_inverse.push_back(rank[static_cast<size_t>(g)]);
      const auto out = run_unique(x, sorted, axis < 0 ? -1 : axis);
      EXPECT_EQ(ints(out[1]), want_first) << "sorted " << sorted << " axis " << axis;
      EXPECT_EQ(ints(out[2]), want_inverse) << "sorted " << sorted << " axis " << axis;
      EXPECT_EQ(ints(out[3]), want_counts) << "sorted " << sorted << " axis " << axis;
      const int64_t m = static_cast<int64_t>(order.size());
      for (int64_t r = 0; r < m; ++r) {
        std::vector<float> got;
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i)
            got.push_back(out[0].data<float>()[(o * m + r) * inner + i]);
        EXPECT_TRUE(same(got, slice(want_first[static_cast<size_t>(r)]))) << "value " << r;
      }
    }
  }
}

}  // namespace
}  // namespace volt
