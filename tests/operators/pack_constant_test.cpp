// dnnl_adapter::pack_constant: a constant weight reordered once into the layout a primitive
// chose, with the way back for the planner to release the model's copy; none of that where the
// layout chosen is the weight's own.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "runtime/contexts.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

// A constant that a primitive reads in the layout it already has is not copied: the kernel gets
// the model's tensor back and keeps no copy for the planner to release. Another layout gets a
// copy, released with the way back.
TEST(PackConstant, TheWeightsOwnLayoutReadsTheWeightInPlace) {
  std::vector<float> values(16 * 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  ModelBuilder b;
  b.input("x", 1, {2, 16}).output("y", 1, {2, 8}).initializer("W", {16, 8}, values);
  b.node("MatMul", {"x", "W"}, {"y"});
  const std::string bytes = b.bytes();
  const Model m = load_model_from_bytes(bytes.data(), bytes.size());
  const Tensor& w = m.graph.initializers.at("W");
  const TypeShape x_type{ValueInfo::Kind::Tensor, DType::Float, {2, 16}, true};
  const TypeShape w_type = TypeShape::of(w);
  const Value w_value = w;
  const std::vector<const TypeShape*> types = {&x_type, &w_type};
  const std::vector<const Value*> inputs = {nullptr, &w_value};
  const auto f32 = dnnl::memory::data_type::f32;
  const dnnl::memory::desc rows = dnnl_adapter::plain_md({16, 8}, f32);
  {
    NodeInferContext ctx(m.graph.nodes[0], types, inputs, 1);
    const Tensor packed = dnnl_adapter::pack_constant(ctx, 1, w, rows, rows);
    EXPECT_EQ(packed.raw(), w.raw());
    EXPECT_TRUE(ctx.restorers.size() < 2 || !ctx.restorers[1].restore);
  }
  NodeInferContext ctx(m.graph.nodes[0], types, inputs, 1);
  const dnnl::memory::desc columns({16, 8}, f32, dnnl::memory::format_tag::ba);
  const Tensor packed = dnnl_adapter::pack_constant(ctx, 1, w, rows, columns);
  ASSERT_NE(packed.raw(), w.raw());
  const float* p = static_cast<const float*>(packed.raw());
  for (int64_t k = 0; k < 16; ++k)
    for (int64_t n = 0; n < 8; ++n) ASSERT_EQ(p[n * 16 + k], values[k * 8 + n]);
  ASSERT_GE(ctx.restorers.size(), 2u);
  ASSERT_TRUE(ctx.restorers[1].restore);
  const Tensor back = ctx.restorers[1].restore();
  EXPECT_EQ(std::memcmp(back.raw(), values.data(), values.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace volt
