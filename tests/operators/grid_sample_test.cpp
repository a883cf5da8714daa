// GridSample fed grid values that are not numbers or lie absurdly far outside: every padding
// mode and interpolation answers 0 there (and samples the finite points as before), with no
// undefined conversion of the coordinate to an index (UBSan's build runs this too).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

TEST(GridSample, NonFiniteAndFarGridValuesReadNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  // Four output points: (0, 0) the image's centre, then NaN, +inf and 1e30 coordinates.
  const std::vector<float> grid = {0, 0, nan, 0, inf, 0, 0, 1e30f};
  for (const char* padding : {"zeros", "border", "reflection"})
    for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
      ModelBuilder b(16);
      b.input("x", 1, {1, 1, 4, 4}).input("grid", 1, {1, 1, 4, 2}).output_any("y", 1);
      b.node("GridSample", {"x", "grid"}, {"y"}, [&](onnx::NodeProto& n) {
        ModelBuilder::set_string(n, "padding_mode", padding);
        ModelBuilder::set_string(n, "mode", mode);
      });
      const std::string bytes = b.bytes();
      Session s = Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({}));
      const Tensor y = s.run({{"x", Tensor::from(std::vector<float>(16, 2.0f), {1, 1, 4, 4})},
                              {"grid", Tensor::from(grid, {1, 1, 4, 2})}})[0]
                           .tensor();
      EXPECT_NEAR(y.data<float>()[0], 2.0f, 1e-5f) << padding << " " << mode;
      for (int i = 1; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], 0.0f) << padding << " " << mode;
    }
}

}  // namespace
}  // namespace volt
