// Ops that move elements as blocks, against their definitions index by index: DepthToSpace
// (DCR and CRD) and SpaceToDepth as 6-D strided copies (block sizes 2 and 3, two images, sizes
// large enough for parallel pieces); ReverseSequence by rows (time first or batch first,
// lengths 0 to full), and its refusal of a length count that is not the batch's.
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

TEST(ReverseSequence, MatchesItsDefinition) {
  const int64_t steps = 9, batch = 4, inner = 5;
  const std::vector<int64_t> lens = {0, 9, 3, 1};
  for (int64_t time_axis : {0, 1}) {
    const Shape shape = time_axis == 0 ? Shape{steps, batch, inner} : Shape{batch, steps, inner};
    const Tensor x = counting(shape);
    ModelBuilder b(13);
    b.input("x", 1, shape).input_any("lens", 7).output_any("y", 1);
    b.node("ReverseSequence", {"x", "lens"}, {"y"}, [&](onnx::NodeProto& n) {
      ModelBuilder::set_int(n, "time_axis", time_axis);
      ModelBuilder::set_int(n, "batch_axis", 1 - time_axis);
    });
    const std::string bytes = b.bytes();
    Session s =
        Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
    const Tensor y = s.run({{"x", x}, {"lens", Tensor::from(lens, {batch})}})[0].tensor();
    auto at = [&](const Tensor& t, int64_t step, int64_t entry, int64_t i) {
      const int64_t row = time_axis == 0 ? step * batch + entry : entry * steps + step;
      return t.data<float>()[row * inner + i];
    };
    int64_t wrong = 0;
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t e = 0; e < batch; ++e)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t len = lens[static_cast<size_t>(e)];
          wrong += at(y, t, e, i) != at(x, t < len ? len - 1 - t : t, e, i);
        }
    EXPECT_EQ(wrong, 0) << "time_axis " << time_axis;
    try {
      s.run({{"x", x}, {"lens", Tensor::from(std::vector<int64_t>{1, 2}, {2})}});
      ADD_FAILURE() << "two lengths for four batch entries ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sequence_lens"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace volt
