// Resize's fp32 plane kernel against the general loop in float64 (the reference) in every
// interpolation and coordinate mode, by scales and by sizes, on odd sizes; and the cases the
// plane kernel must leave to the reference (an outer axis resized, tf_crop_and_resize).
// Linear and cubic weights sum to 1 over at most 16 taps of values in [-1, 1]: fp32 rounding
// stays under 1e-6; nearest copies values exactly.
#include <gtest/gtest.h>

#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

struct ResizeCase {
  std::string mode, transform, nearest = "round_prefer_floor";
  std::vector<int64_t> x;
  std::vector<float> scales;   // or
  std::vector<int64_t> sizes;  // one of the two
};

// Runs Resize-13 on `values` (shape c.x) in `elem` (1 float, 11 double); returns the output as
// doubles, and in `reference` why it ran the reference loop ("" if it did not).
std::vector<double> run_resize(const ResizeCase& c, const std::vector<double>& values, int elem,
                               std::string& reference) {
  ModelBuilder b(13);
  b.input("x", elem, c.x).output_any("y", elem);
  b.initializer("roi", {0}, {});
  b.initializer("scales", {static_cast<int64_t>(c.scales.size())}, c.scales);
  std::vector<std::string> ins = {"x", "roi", "scales"};
  if (!c.sizes.empty()) {
    b.initializer_i64("sizes", {static_cast<int64_t>(c.sizes.size())}, c.sizes);
    ins = {"x", "roi", "", "sizes"};
  }
  b.node(
      "Resize", ins, {"y"},
      [&](onnx::NodeProto& n) {
        ModelBuilder::set_string(n, "mode", c.mode);
        ModelBuilder::set_string(n, "coordinate_transformation_mode", c.transform);
        ModelBuilder::set_string(n, "nearest_mode", c.nearest);
      },
      "resize");
  const std::string bytes = b.bytes();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  Shape shape(c.x.begin(), c.x.end());
  Tensor x = Tensor::empty(elem == 1 ? DType::Float : DType::Double, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    if (elem == 1)
      x.data<float>()[i] = static_cast<float>(values[i]);
    else
      x.data<double>()[i] = values[i];
  }
  RunProfile profile;
  const Tensor y = s.run({{"x", x}}, {}, {.profile = &profile})[0].tensor();
  reference = "";
  for (const ProfileEvent& e : profile.events)
    if (e.node == "resize") reference = e.reference;
  std::vector<double> out(static_cast<size_t>(y.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = elem == 1 ? y.data<float>()[i] : y.data<double>()[i];
  return out;
}

void expect_plane_kernel_matches(const ResizeCase& c, bool fast) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  int64_t n = 1;
  for (int64_t d : c.x) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = u(rng);
  std::string why32, why64;
  const auto f32 = run_resize(c, v, 1, why32), f64 = run_resize(c, v, 11, why64);
  const std::string what = c.mode + "/" + c.transform + "/" + c.nearest;
  EXPECT_EQ(why32.empty(), fast) << what << ": " << why32;
  EXPECT_FALSE(why64.empty()) << what;  // float64 is the reference loop
  ASSERT_EQ(f32.size(), f64.size()) << what;
  // Nearest copies: the fp32 run holds the fp32 rounding of the float64 run's values, exactly.
  for (size_t i = 0; i < f32.size(); ++i)
    if (c.mode == "nearest")
      ASSERT_EQ(f32[i], static_cast<double>(static_cast<float>(f64[i]))) << what << " " << i;
    else
      ASSERT_NEAR(f32[i], f64[i], 1e-6) << what << " element " << i;
}

TEST(Resize, PlaneKernelAgreesWithTheReference) {
  const std::vector<ResizeCase> cases = {
      {"nearest", "asymmetric", "floor", {2, 3, 5, 7}, {1, 1, 2, 2}, {}},
      {"nearest", "half_pixel", "round_prefer_ceil", {1, 2, 9, 6}, {1, 1, 1.7f, 0.6f}, {}},
      {"nearest", "align_corners", "ceil", {1, 3, 4, 4}, {}, {1, 3, 11, 5}},
      {"linear", "half_pixel", "round_prefer_floor", {2, 3, 5, 7}, {1, 1, 2, 2}, {}},
      {"linear", "pytorch_half_pixel", "round_prefer_floor", {1, 4, 7, 1}, {}, {1, 4, 13, 1}},
      {"linear", "align_corners", "round_prefer_floor", {1, 2, 6, 9}, {}, {1, 2, 11, 4}},
      {"linear", "asymmetric", "round_prefer_floor", {3, 5, 3}, {1, 3, 2.5f}, {}},
      {"cubic", "half_pixel", "round_prefer_floor", {1, 2, 6, 5}, {1, 1, 1.5f, 3}, {}},
      {"cubic", "asymmetric", "round_prefer_floor", {1, 1, 8, 8}, {}, {1, 1, 5, 13}},
  };
  for (const auto& c : cases) expect_plane_kernel_matches(c, true);
}

TEST(Resize, OuterAxesAndCropsStayOnTheReference) {
  expect_plane_kernel_matches(
      {"linear", "half_pixel", "round_prefer_floor", {2, 3, 4, 4}, {1, 2, 2, 2}, {}}, false);
}

}  // namespace
}  // namespace volt
