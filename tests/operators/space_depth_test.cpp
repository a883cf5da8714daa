// DepthToSpace (DCR and CRD) and SpaceToDepth as 6-D strided copies, against their definitions
// index by index: block sizes 2 and 3, two images, sizes large enough for parallel pieces.
#include <gtest/gtest.h>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

Tensor run_one(const char* op, const Tensor& x, int64_t block, const char* mode) {
  ModelBuilder b(13);
  b.input("x", 1, x.shape()).output_any("y", 1);
  b.node(op, {"x"}, {"y"}, [&](onnx::NodeProto& n) {
    ModelBuilder::set_int(n, "blocksize", block);
    if (mode) ModelBuilder::set_string(n, "mode", mode);
  });
  const std::string bytes = b.bytes();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  return s.run({{"x", x}})[0].tensor();
}

Tensor counting(const Shape& s) {
  Tensor t = Tensor::empty(DType::Float, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(SpaceDepth, MatchTheirDefinitions) {
  for (int64_t b : {2, 3}) {
    const int64_t n = 2, c = 4 * b * b, h = 30, w = 36;
    const Tensor x = counting({n, c, h, w});
    auto xat = [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
      return x.data<float>()[((i0 * c + i1) * h + i2) * w + i3];
    };
    for (const char* mode : {"DCR", "CRD"}) {
      const Tensor y = run_one("DepthToSpace", x, b, mode);
      const int64_t oc = c / (b * b);
      ASSERT_EQ(y.shape(), (Shape{n, oc, h * b, w * b}));
      int64_t wrong = 0;
      for (int64_t i0 = 0; i0 < n; ++i0)
        for (int64_t ch = 0; ch < oc; ++ch)
          for (int64_t i = 0; i < h * b; ++i)
            for (int64_t j = 0; j < w * b; ++j) {
              const int64_t bi = i % b, bj = j % b;
              const int64_t from =
                  std::string(mode) == "CRD" ? ch * b * b + bi * b + bj : (bi * b + bj) * oc + ch;
              wrong += y.data<float>()[((i0 * oc + ch) * h * b + i) * w * b + j] !=
                       xat(i0, from, i / b, j / b);
            }
      EXPECT_EQ(wrong, 0) << "DepthToSpace " << mode << " block " << b;
    }
    const Tensor z = run_one("SpaceToDepth", x, b, nullptr);
    ASSERT_EQ(z.shape(), (Shape{n, c * b * b, h / b, w / b}));
    int64_t wrong = 0;
    for (int64_t i0 = 0; i0 < n; ++i0)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < w; ++j) {
            const int64_t to = ((i % b) * b + (j % b)) * c + ch;
            wrong += z.data<float>()[((i0 * c * b * b + to) * (h / b) + i / b) * (w / b) + j / b] !=
                     xat(i0, ch, i, j);
          }
    EXPECT_EQ(wrong, 0) << "SpaceToDepth block " << b;
  }
}

}  // namespace
}  // namespace volt
