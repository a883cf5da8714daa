// The kernels on BroadcastIterator::for_each_row_parallel (Where, Expand) against an
// index-by-index reference: rows shorter than a chunk (grouped), one long row (split into
// pieces), every operand broadcast in some position, and a scalar fill as attention masks
// write it.
#include <gtest/gtest.h>

#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

Tensor random_floats(const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor t = Tensor::empty(DType::Float, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Tensor random_bools(const Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::empty(DType::Bool, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = rng() % 2 == 0;
  return t;
}

// The element of `t` (shape broadcast to `out`) at out's multi-index of flat position `i`.
template <class T>
T at(const Tensor& t, const Shape& out, int64_t i) {
  int64_t offset = 0, stride = 1;
  const size_t lead = out.size() - t.rank();
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t idx = i % out[d];
    i /= out[d];
    if (d < lead) continue;
    const int64_t size = t.shape()[d - lead];
    if (size > 1) offset += idx * stride;
    stride *= size;
  }
  return t.data<T>()[offset];
}

TEST(Where, MatchesTheBroadcastDefinition) {
  std::mt19937 rng(31);
  struct Case {
    Shape c, a, b, out;
  };
  for (const Case& k :
       std::vector<Case>{{{4, 1, 300}, {4, 5, 300}, {}, {4, 5, 300}},
                         {{70000}, {70000}, {1}, {70000}},
                         {{3, 1}, {1, 4}, {3, 4}, {3, 4}},
                         {{2, 1, 1, 40000}, {2, 3, 1, 40000}, {2, 3, 5, 1}, {2, 3, 5, 40000}}}) {
    ModelBuilder b(13);
    b.input("c", 9, k.c).input("a", 1, k.a).input("b", 1, k.b).output_any("y", 1);
    b.node("Where", {"c", "a", "b"}, {"y"});
    const std::string bytes = b.bytes();
    Session s =
        Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
    const Tensor c = random_bools(k.c, rng), x = random_floats(k.a, rng),
                 y = random_floats(k.b, rng);
    const Tensor out = s.run({{"c", c}, {"a", x}, {"b", y}})[0].tensor();
    ASSERT_EQ(out.shape(), k.out);
    int64_t wrong = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float want = at<bool>(c, k.out, i) ? at<float>(x, k.out, i) : at<float>(y, k.out, i);
      wrong += out.data<float>()[i] != want;
    }
    EXPECT_EQ(wrong, 0) << shape_str(k.out);
  }
}

TEST(Expand, MatchesTheBroadcastDefinition) {
  std::mt19937 rng(67);
  struct Case {
    Shape in, to, out;
  };
  for (const Case& k : std::vector<Case>{{{1, 1, 768}, {64, 128, 768}, {64, 128, 768}},
                                         {{3, 1}, {2, 3, 50000}, {2, 3, 50000}},
                                         {{5}, {4, 1}, {4, 5}},
                                         {{2, 1, 7}, {2, 6, 1}, {2, 6, 7}}}) {
    ModelBuilder b(13);
    b.input("x", 1, k.in).output_any("y", 1);
    b.initializer_i64("shape", {static_cast<int64_t>(k.to.size())}, k.to);
    b.node("Expand", {"x", "shape"}, {"y"});
    const std::string bytes = b.bytes();
    Session s =
        Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
    const Tensor x = random_floats(k.in, rng);
    const Tensor out = s.run({{"x", x}})[0].tensor();
    ASSERT_EQ(out.shape(), k.out);
    int64_t wrong = 0;
    for (int64_t i = 0; i < out.numel(); ++i)
      wrong += out.data<float>()[i] != at<float>(x, k.out, i);
    EXPECT_EQ(wrong, 0) << shape_str(k.out);
  }
}

}  // namespace
}  // namespace volt
