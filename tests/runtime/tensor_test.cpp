#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

TEST(Float16, RoundTripsEveryHalfExactly) {
  // Every finite half converts to float and back to the same bits.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const Float16 h = Float16::from_bits(static_cast<uint16_t>(b));
    const float f = static_cast<float>(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(Float16(f))));
      continue;
    }
    ASSERT_EQ(Float16(f).bits, b) << "bits " << b << " -> " << f;
  }
}

TEST(Float16, RoundsToNearestEven) {
  EXPECT_EQ(Float16(1.0f).bits, 0x3c00);
  // 1 + 2^-11 lies halfway between 1 and the next half: ties go to even (1.0).
  EXPECT_EQ(Float16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  // 1 + 3 * 2^-11 is halfway between two halves whose even one is above.
  EXPECT_EQ(Float16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  EXPECT_EQ(Float16(65520.0f).bits, 0x7c00);  // rounds past the largest half: infinity
  EXPECT_EQ(Float16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Float16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(Float16(-0.0f).bits, 0x8000);
}

TEST(BFloat16, RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);      // tie -> even
  EXPECT_EQ(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0x4049)), 3.140625f);
}

TEST(Tensor, FromCopiesAndChecksCount) {
  Tensor t = Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::Float);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.data<float>()[5], 6.0f);
  EXPECT_VOLT_ERROR(Tensor::from<float>({1, 2, 3}, {2, 3}), InvalidArgument, "3 values", "[2,3]");
  EXPECT_VOLT_ERROR(t.data<int64_t>(), InvalidArgument, "float32", "int64");
}

TEST(Tensor, ReshapeSharesCloneCopies) {
  Tensor t = Tensor::from<int64_t>({1, 2, 3, 4}, {4});
  Tensor r = t.reshaped({2, 2});
  Tensor c = t.clone();
  t.data<int64_t>()[0] = 9;
  EXPECT_EQ(r.data<int64_t>()[0], 9);
  EXPECT_EQ(c.data<int64_t>()[0], 1);
  EXPECT_VOLT_ERROR(t.reshaped({3}), InvalidArgument, "[4]", "[3]");
}

TEST(Tensor, HugeOrNegativeShapesAreErrorsNotCrashes) {
  EXPECT_VOLT_ERROR(Tensor::empty(DType::Float, {-1, 3}), InvalidArgument, "negative");
  EXPECT_VOLT_ERROR(Tensor::empty(DType::Float, {int64_t{1} << 62, 1 << 20}), InvalidArgument,
                    "too many");
  EXPECT_VOLT_ERROR(Tensor::empty(DType::Float, {int64_t{1} << 61}), OutOfMemory);
}

TEST(Tensor, StringsAreConstructedEmpty) {
  Tensor t = Tensor::empty(DType::String, {3});
  EXPECT_EQ(t.data<std::string>()[2], "");
  t.data<std::string>()[1] = "volt";
  EXPECT_EQ(t.clone().data<std::string>()[1], "volt");
}

TEST(Value, KindsAndChecks) {
  Value v = Tensor::scalar(1.5f);
  EXPECT_TRUE(v.is_tensor());
  Value s = Value::sequence({Tensor::scalar(1.0f), Tensor::scalar(2.0f)});
  EXPECT_EQ(s.sequence_items().size(), 2u);
  EXPECT_VOLT_ERROR(Value::sequence({Tensor::scalar(1.0f), Tensor::scalar<int64_t>(2)}),
                    InvalidArgument, "one dtype");
  EXPECT_TRUE(Value::none().is_none());
  EXPECT_VOLT_ERROR(Value::none().tensor(), InvalidArgument, "not a tensor");
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

TEST(RowSparseTensor, DenseFormAndEveryStructuralError) {
  const RowSparseTensor t = RowSparseTensor::create({4, 2}, Tensor::from<int64_t>({1, 3}, {2}),
                                                    Tensor::from<float>({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(t.row_count(), 2);
  const Tensor d = t.to_dense();
  ASSERT_EQ(d.shape(), (Shape{4, 2}));
  const std::vector<float> want = {0, 0, 1, 2, 0, 0, 3, 4};
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(d.data<float>()[i], want[static_cast<size_t>(i)]);
  auto message = [](Shape shape, Tensor rows, Tensor values) {
    try {
      RowSparseTensor::create(std::move(shape), std::move(rows), std::move(values));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor two_rows = Tensor::from<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_NE(message({4, 2}, Tensor::from<int64_t>({3, 1}, {2}), two_rows).find("increasing"),
            std::string::npos);
  EXPECT_NE(message({4, 2}, Tensor::from<int64_t>({1, 1}, {2}), two_rows).find("increasing"),
            std::string::npos);
  EXPECT_NE(message({4, 2}, Tensor::from<int64_t>({1, 4}, {2}), two_rows).find("outside"),
            std::string::npos);
  EXPECT_NE(message({4, 2}, Tensor::from<int64_t>({-1, 2}, {2}), two_rows).find("outside"),
            std::string::npos);
  EXPECT_NE(message({4, 3}, Tensor::from<int64_t>({1, 2}, {2}), two_rows).find("want [2,3]"),
            std::string::npos);
  EXPECT_NE(message({4, 2}, Tensor::from<float>({1, 2}, {2}), two_rows).find("int64"),
            std::string::npos);
  EXPECT_NE(message({}, Tensor::from<int64_t>({1, 2}, {2}), two_rows).find("rank"),
            std::string::npos);
}

}  // namespace
}  // namespace volt
