// GroupNormalization against its definition computed here in double: opset 21 (scale and bias
// per channel) and opset 18 (per group), 2-D and 4-D inputs, one group and one channel per
// group; and a channel count the groups do not divide, refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

TEST(GroupNormalization, MatchesTheDefinition) {
  std::mt19937 rng(79);
  std::uniform_real_distribution<float> u(-2, 3);
  struct Case {
    Shape x;
    int64_t groups;
  };
  for (int opset : {18, 21})
    for (const Case& c :
         std::vector<Case>{{{2, 6, 5, 7}, 3}, {{3, 8}, 2}, {{1, 4, 300}, 1}, {{1, 4, 9, 9}, 4}}) {
      const int64_t n = c.x[0], ch = c.x[1], params = opset >= 21 ? ch : c.groups;
      std::vector<float> x(static_cast<size_t>(numel_of(c.x))), scale(static_cast<size_t>(params)),
          bias(static_cast<size_t>(params));
      for (float& v : x) v = u(rng);
      for (float& v : scale) v = u(rng);
      for (float& v : bias) v = u(rng);
      ModelBuilder b(opset);
      b.input("x", 1, c.x).output_any("y", 1);
      b.initializer("scale", {params}, scale).initializer("bias", {params}, bias);
      b.node("GroupNormalization", {"x", "scale", "bias"}, {"y"}, [&](onnx::NodeProto& node) {
        ModelBuilder::set_int(node, "num_groups", c.groups);
        ModelBuilder::set_float(node, "epsilon", 1e-3f);
      });
      const std::string bytes = b.bytes();
      Session s =
          Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
      const Tensor y = s.run({{"x", Tensor::from(x, c.x)}})[0].tensor();
      const int64_t spatial = numel_of(c.x) / (n * ch), per = ch / c.groups;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < c.groups; ++g) {
          const int64_t start = (i * ch + g * per) * spatial, len = per * spatial;
          double mean = 0, var = 0;
          for (int64_t k = 0; k < len; ++k) mean += x[static_cast<size_t>(start + k)];
          mean /= static_cast<double>(len);
          for (int64_t k = 0; k < len; ++k)
            var += std::pow(x[static_cast<size_t>(start + k)] - mean, 2);
          var /= static_cast<double>(len);
          for (int64_t k = 0; k < len; ++k) {
            const size_t p = static_cast<size_t>(opset >= 21 ? g * per + k / spatial : g);
            const double want =
                (x[static_cast<size_t>(start + k)] - mean) / std::sqrt(var + 1e-3) * scale[p] +
                bias[p];
            EXPECT_NEAR(y.data<float>()[start + k], want, 1e-4 * (1 + std::abs(want)))
                << "opset " << opset << " " << shape_str(c.x);
          }
        }
    }
  ModelBuilder b(21);
  b.input("x", 1, {1, 6, 2}).output_any("y", 1);
  b.initializer("scale", {6}, std::vector<float>(6, 1))
      .initializer("bias", {6}, std::vector<float>(6, 0));
  b.node("GroupNormalization", {"x", "scale", "bias"}, {"y"},
         [](onnx::NodeProto& node) { ModelBuilder::set_int(node, "num_groups", 4); });
  const std::string bytes = b.bytes();
  try {
    Session s = Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({}));
    s.run({{"x", Tensor::from(std::vector<float>(12, 1.0f), {1, 6, 2})}});
    ADD_FAILURE() << "6 channels split into 4 groups";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("groups"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace volt
