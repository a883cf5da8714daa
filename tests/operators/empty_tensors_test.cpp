// Empty tensors (a zero in the shape) flow through kernels, oneDNN-backed and reference alike,
// with the right output shapes and values and no crash.
#include <gtest/gtest.h>

#include "operators/op_runner.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::run_op;

TEST(EmptyTensors, ShapesFlowThroughKernels) {
  for (DType t : {DType::Float, DType::Double}) {
    EXPECT_EQ(run_op("Relu", {Tensor::empty(DType::Double, {0, 3})}, t).shape(), (Shape{0, 3}));
    EXPECT_EQ(
        run_op("Add", {Tensor::empty(DType::Double, {0, 3}), Tensor::empty(DType::Double, {3})}, t)
            .shape(),
        (Shape{0, 3}));
    EXPECT_EQ(
        run_op("MatMul",
               {Tensor::empty(DType::Double, {0, 4}), Tensor::empty(DType::Double, {4, 5})}, t)
            .shape(),
        (Shape{0, 5}));
    EXPECT_EQ(run_op("Softmax", {Tensor::empty(DType::Double, {0, 5})}, t).shape(), (Shape{0, 5}));
    EXPECT_EQ(run_op("Conv",
                     {Tensor::empty(DType::Double, {0, 2, 5, 5}),
                      Tensor::empty(DType::Double, {3, 2, 3, 3})},
                     t)
                  .shape(),
              (Shape{0, 3, 3, 3}));
    EXPECT_EQ(run_op("MaxPool", {Tensor::empty(DType::Double, {0, 2, 4, 4})}, t,
                     [](auto& n) {
                       ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
                     })
                  .shape(),
              (Shape{0, 2, 3, 3}));
    EXPECT_EQ(run_op("Concat",
                     {Tensor::empty(DType::Double, {2, 0}), Tensor::from<double>({1, 2}, {2, 1})},
                     t, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); })
                  .shape(),
              (Shape{2, 1}));
    // A sum over an empty axis is zero; a matmul with K = 0 is all zeros.
    const Tensor s = run_op(
        "ReduceSum", {Tensor::empty(DType::Double, {3, 0})}, t,
        [](auto& n) { ModelBuilder::set_int(n, "keepdims", 0); }, 11);
    ASSERT_EQ(s.shape(), (Shape{}));
    EXPECT_EQ(s.data<double>()[0], 0.0);
    const Tensor m = run_op(
        "MatMul", {Tensor::empty(DType::Double, {2, 0}), Tensor::empty(DType::Double, {0, 3})}, t);
    ASSERT_EQ(m.shape(), (Shape{2, 3}));
    for (int64_t i = 0; i < m.numel(); ++i) EXPECT_EQ(m.data<double>()[i], 0.0);
  }
}

}  // namespace
}  // namespace volt
