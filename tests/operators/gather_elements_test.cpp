// GatherElements and ScatterElements by rows of the indices' last axis against their
// definitions: every axis of a 3-D tensor, indices smaller than data off the axis, negative
// indices, every reduction over repeated indices (in the order the definition meets them), and
// an index out of range refused with the node's name.
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

TEST(ScatterElements, MatchesItsDefinition) {
  std::mt19937 rng(67);
  const Shape ds = {4, 30, 50};
  Tensor data = Tensor::empty(DType::Float, ds);
  std::uniform_real_distribution<float> v(-2.0f, 2.0f);
  for (int64_t i = 0; i < data.numel(); ++i) data.data<float>()[i] = v(rng);
  for (const std::string reduction : {"none", "add", "mul", "max", "min"})
    for (int64_t axis : {0, 1, 2}) {
      Shape is = {3, 20, 40};
      is[static_cast<size_t>(axis)] = 60;  // (more indices than the axis: repeats)
      const int64_t n = ds[static_cast<size_t>(axis)];
      Tensor idx = Tensor::empty(DType::Int64, is), upd = Tensor::empty(DType::Float, is);
      std::uniform_int_distribution<int64_t> u(-n, n - 1);
      for (int64_t i = 0; i < idx.numel(); ++i) {
        idx.data<int64_t>()[i] = u(rng);
        upd.data<float>()[i] = v(rng);
      }
      ModelBuilder b(18);
      b.input("data", 1, ds).input("idx", 7, is).input("upd", 1, is).output_any("y", 1);
      b.node("ScatterElements", {"data", "idx", "upd"}, {"y"}, [&](onnx::NodeProto& node) {
        ModelBuilder::set_int(node, "axis", axis);
        ModelBuilder::set_string(node, "reduction", reduction);
      });
      const std::string bytes = b.bytes();
      Session s =
          Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
      const Tensor y = s.run({{"data", data}, {"idx", idx}, {"upd", upd}})[0].tensor();
      ASSERT_EQ(y.shape(), ds);
      std::vector<float> want(data.data<float>(), data.data<float>() + data.numel());
      for (int64_t e = 0; e < idx.numel(); ++e) {
        int64_t c[3] = {e / (is[1] * is[2]), e / is[2] % is[1], e % is[2]};
        const int64_t i = idx.data<int64_t>()[e];
        c[axis] = i < 0 ? i + n : i;
        float& w = want[static_cast<size_t>((c[0] * ds[1] + c[1]) * ds[2] + c[2])];
        const float x = upd.data<float>()[e];
        w = reduction == "add"   ? w + x
            : reduction == "mul" ? w * x
            : reduction == "max" ? std::max(w, x)
            : reduction == "min" ? std::min(w, x)
                                 : x;
      }
      int64_t wrong = 0;
      for (int64_t i = 0; i < y.numel(); ++i)
        wrong += y.data<float>()[i] != want[static_cast<size_t>(i)];
      EXPECT_EQ(wrong, 0) << reduction << " along axis " << axis;
      idx.data<int64_t>()[7] = n;
      try {
        s.run({{"data", data}, {"idx", idx}, {"upd", upd}});
        ADD_FAILURE() << "an index out of range was written";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      }
    }
}

}  // namespace
}  // namespace volt
