// MatMulInteger and QLinearMatMul follow numpy's matmul shapes (batch axes broadcast, 1-D
// operands) and read per-row / per-column quantization parameters, against loops written here.
#include <gtest/gtest.h>

#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
constexpr int kUInt8 = 2, kInt32 = 6, kFloat = 1;

Tensor random_u8(Shape shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(DType::UInt8, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
  return t;
}

TEST(QuantizedMatMul, MatMulIntegerBroadcastsBatchAxes) {
  // A [3, 1, 2, 4] x B [2, 4, 5] -> [3, 2, 2, 5]: A's batch of 1 meets B's 2.
  std::mt19937 rng(3);
  const Tensor a = random_u8({3, 1, 2, 4}, rng), b = random_u8({2, 4, 5}, rng);
  ModelBuilder mb(10, 6);
  mb.input("a", kUInt8, {3, 1, 2, 4}).input("b", kUInt8, {2, 4, 5}).output_any("y", kInt32);
  mb.input("azp", kUInt8, {}).input("bzp", kUInt8, {5});
  mb.node("MatMulInteger", {"a", "b", "azp", "bzp"}, {"y"});
  const std::string bytes = mb.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size());
  Tensor azp = Tensor::empty(DType::UInt8, {}), bzp = random_u8({5}, rng);
  azp.data<uint8_t>()[0] = 7;
  const Tensor y = s.run({{"a", a}, {"b", b}, {"azp", azp}, {"bzp", bzp}})[0].tensor();
  ASSERT_EQ(y.shape(), (Shape{3, 2, 2, 5}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t c = 0; c < 5; ++c) {
          int64_t want = 0;
          for (int64_t k = 0; k < 4; ++k)
            want += (int64_t{a.data<uint8_t>()[(i * 2 + r) * 4 + k]} - 7) *
                    (int64_t{b.data<uint8_t>()[(j * 4 + k) * 5 + c]} - bzp.data<uint8_t>()[c]);
          EXPECT_EQ(y.data<int32_t>()[((i * 2 + j) * 2 + r) * 5 + c], want);
        }
}

TEST(QuantizedMatMul, QLinearMatMulScalesPerRowAndColumnAndRefusesOtherSizes) {
  std::mt19937 rng(5);
  const Tensor a = random_u8({3, 4}, rng), b = random_u8({4, 2}, rng);
  auto model = [](int64_t a_scales) {
    ModelBuilder mb(10, 6);
    mb.input("a", kUInt8, {3, 4}).input("b", kUInt8, {4, 2}).output_any("y", kUInt8);
    mb.input("as", kFloat, {a_scales}).input("azp", kUInt8, {}).input("bs", kFloat, {2});
    mb.input("bzp", kUInt8, {}).input("ys", kFloat, {}).input("yzp", kUInt8, {});
    mb.node("QLinearMatMul", {"a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"}, {"y"});
    return mb.bytes();
  };
  const std::string bytes = model(3);
  Session s = Session::from_bytes(bytes.data(), bytes.size());
  const Tensor as = Tensor::from<float>({0.01f, 0.02f, 0.03f}, {3}),
               bs = Tensor::from<float>({0.5f, 0.25f}, {2}), ys = Tensor::from<float>({0.2f}, {});
  Tensor azp = Tensor::empty(DType::UInt8, {}), bzp = Tensor::empty(DType::UInt8, {}),
         yzp = Tensor::empty(DType::UInt8, {});
  azp.data<uint8_t>()[0] = 100;
  bzp.data<uint8_t>()[0] = 120;
  yzp.data<uint8_t>()[0] = 128;
  const NamedValues feeds = {{"a", a},   {"as", as},   {"azp", azp}, {"b", b},
                             {"bs", bs}, {"bzp", bzp}, {"ys", ys},   {"yzp", yzp}};
  const Tensor y = s.run(feeds)[0].tensor();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 2; ++c) {
      int64_t acc = 0;
      for (int64_t k = 0; k < 4; ++k)
        acc += (int64_t{a.data<uint8_t>()[r * 4 + k]} - 100) *
               (int64_t{b.data<uint8_t>()[k * 2 + c]} - 120);
      const double v = std::nearbyint(static_cast<double>(acc) * as.data<float>()[r] *
                                      bs.data<float>()[c] / 0.2) +
                       128;
      EXPECT_EQ(y.data<uint8_t>()[r * 2 + c], static_cast<uint8_t>(std::clamp(v, 0.0, 255.0)))
          << r << "," << c;
    }
  // Two a_scale values for three rows would be read past: refused.
  const std::string bad = model(2);
  Session s2 = Session::from_bytes(bad.data(), bad.size());
  NamedValues bad_feeds = feeds;
  bad_feeds[1].second = Tensor::from<float>({0.01f, 0.02f}, {2});
  try {
    s2.run(bad_feeds);
    FAIL() << "two a_scale values for three rows were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a_scale"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace volt
