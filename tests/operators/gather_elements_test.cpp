// GatherElements by rows of the indices' last axis against its definition: every axis of a
// 3-D tensor, indices smaller than data off the axis, negative indices, and an index out of
// range refused with the node's name.
#include <gtest/gtest.h>

#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

TEST(GatherElements, MatchesItsDefinition) {
  std::mt19937 rng(61);
  const Shape ds = {4, 50, 300};
  Tensor data = Tensor::empty(DType::Float, ds);
  for (int64_t i = 0; i < data.numel(); ++i) data.data<float>()[i] = static_cast<float>(i);
  for (int64_t axis : {0, 1, 2}) {
    Shape is = {3, 40, 250};
    is[static_cast<size_t>(axis)] = 7;
    const int64_t n = ds[static_cast<size_t>(axis)];
    Tensor idx = Tensor::empty(DType::Int64, is);
    std::uniform_int_distribution<int64_t> u(-n, n - 1);
    for (int64_t i = 0; i < idx.numel(); ++i) idx.data<int64_t>()[i] = u(rng);
    ModelBuilder b(13);
    b.input("data", 1, ds).input("idx", 7, is).output_any("y", 1);
    b.node("GatherElements", {"data", "idx"}, {"y"},
           [&](onnx::NodeProto& node) { ModelBuilder::set_int(node, "axis", axis); });
    const std::string bytes = b.bytes();
    Session s =
        Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
    const Tensor y = s.run({{"data", data}, {"idx", idx}})[0].tensor();
    ASSERT_EQ(y.shape(), is);
    int64_t wrong = 0;
    for (int64_t e = 0; e < y.numel(); ++e) {
      int64_t c[3] = {e / (is[1] * is[2]), e / is[2] % is[1], e % is[2]};
      const int64_t i = idx.data<int64_t>()[e];
      c[axis] = i < 0 ? i + n : i;
      wrong += y.data<float>()[e] != data.data<float>()[(c[0] * ds[1] + c[1]) * ds[2] + c[2]];
    }
    EXPECT_EQ(wrong, 0) << "axis " << axis;
    idx.data<int64_t>()[idx.numel() - 1] = n;
    try {
      s.run({{"data", data}, {"idx", idx}});
      ADD_FAILURE() << "an index out of range was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    }
  }
}

}  // namespace
}  // namespace volt
