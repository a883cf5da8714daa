// Gradient rules of MatMul and Gemm. With a 2-D weight whose shape the model fixes (the usual
// layer), the gradients are plain Gemm/MatMul nodes that run on oneDNN; otherwise volt's
// MatMulGrad kernel handles any rank and broadcasting.
#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {

void matmul(GradEmitter& e) {
  const std::string g = e.grad_of_output(0);
  const auto b_shape = e.static_shape(e.input(1));
  const auto a_shape = e.static_shape(e.input(0));
  const bool weight_2d = b_shape && b_shape->size() == 2 && (!a_shape || a_shape->size() >= 2);
  if (weight_2d) {
    const int64_t k = (*b_shape)[0], n = (*b_shape)[1];
    if (e.needs_grad(0))
      e.set_grad(0, e.emit1("MatMul", {g, e.emit1("Transpose", {e.input(1)},
                                                  {{"perm", ints_attr({1, 0})}})}));
    if (e.needs_grad(1)) {
      const std::string a2 =
          e.emit1("Reshape", {e.input(0), e.constant(Tensor::from<int64_t>({-1, k}, {2}))});
      const std::string g2 =
          e.emit1("Reshape", {g, e.constant(Tensor::from<int64_t>({-1, n}, {2}))});
      e.set_grad(1, e.emit1("Gemm", {a2, g2}, {{"transA", int_attr(1)}}));
    }
    return;
  }
  for (int64_t wrt : {0, 1})
    if (e.needs_grad(static_cast<size_t>(wrt)))
      e.set_grad(static_cast<size_t>(wrt), e.emit1("MatMulGrad", {g, e.input(0), e.input(1)},
                                                   {{"wrt", int_attr(wrt)}}, kVoltDomain));
}

// Y = alpha * A' B' + beta * C, with A' = transA ? A^T : A and B' likewise.
void gemm(GradEmitter& e) {
  const Node& n = e.node();
  const std::string g = e.grad_of_output(0);
  const int64_t ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
  const float alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  auto gemm2 = [&](const std::string& x, const std::string& y, int64_t tx, int64_t ty) {
    return e.emit1(
        "Gemm", {x, y},
        {{"transA", int_attr(tx)}, {"transB", int_attr(ty)}, {"alpha", float_attr(alpha)}});
  };
  if (e.needs_grad(0))
    e.set_grad(0, ta ? gemm2(e.input(1), g, tb, 1) : gemm2(g, e.input(1), 0, 1 - tb));
  if (e.needs_grad(1))
    e.set_grad(1, tb ? gemm2(g, e.input(0), 1, ta) : gemm2(e.input(0), g, 1 - ta, 0));
  if (n.has_input(2) && e.needs_grad(2))
    e.set_grad(2, e.sum_to(beta == 1.0f ? g : e.scale(g, beta), e.input(2)));
}

// dA = dY * cofactors(A), batched over the leading axes (dY broadcasts over each matrix).
void det(GradEmitter& e) {
  if (e.needs_grad(0))
    e.set_grad(0, e.emit1("DetGrad", {e.grad_of_output(0), e.input(0)}, {}, kVoltDomain));
}

}  // namespace

VOLT_REGISTER_GRADIENT(matmul, "MatMul", matmul);
VOLT_REGISTER_GRADIENT(det, "Det", det);
VOLT_REGISTER_GRADIENT(gemm, "Gemm", gemm);

}  // namespace volt
