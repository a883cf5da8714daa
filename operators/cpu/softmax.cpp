// Softmax, LogSoftmax and Hardmax. Before opset 13 they work on the input coerced to 2-D at
// `axis` (default 1); from 13 on, along the single `axis` (default -1). Both forms become one
// canonical [outer, n, inner] problem here. f32 runs on oneDNN's softmax primitives.
#include <cmath>
#include <limits>

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

struct Extent {
  int64_t outer = 1, n = 1, inner = 1;
};

struct SoftmaxState {
  dnnl::primitive prim;
  dnnl::memory::desc md, scratch;
};

class Softmax final : public Kernel {
 public:
  Softmax(const Node& n, SoftmaxKind kind)
      : kind_(kind), coerced_(n.opset < 13), axis_(n.attr_int("axis", n.opset < 13 ? 1 : -1)) {}

  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    const Extent e = extent(x, ctx.node());
    ctx.set_output(0, ctx.dtype(0), x);
    if (ctx.dtype(0) != DType::Float || kind_ == SoftmaxKind::Hardmax || numel_of(x) == 0) return;
    dnnl_adapter::prepare_or_fall_back(ctx, [&] {
      auto st = std::make_shared<SoftmaxState>();
      // Along the innermost axis, as a 2-D problem: oneDNN's kernel for [outer, n, 1] took
      // twice as long on BERT's attention scores.
      st->md = e.inner == 1
                   ? dnnl_adapter::plain_md({e.outer, e.n}, dnnl::memory::data_type::f32)
                   : dnnl_adapter::plain_md({e.outer, e.n, e.inner}, dnnl::memory::data_type::f32);
      if (kind_ == SoftmaxKind::Softmax) {
        dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, st->md, 1);
        dnnl::softmax_forward::primitive_desc pd(d, dnnl_adapter::scratch_attr(),
                                                 dnnl_adapter::engine());
        st->prim = dnnl::softmax_forward(pd);
        st->scratch = pd.scratchpad_desc();
      } else {
        dnnl::logsoftmax_forward::desc d(dnnl::prop_kind::forward_inference, st->md, 1);
        dnnl::logsoftmax_forward::primitive_desc pd(d, dnnl_adapter::scratch_attr(),
                                                    dnnl_adapter::engine());
        st->prim = dnnl::logsoftmax_forward(pd);
        st->scratch = pd.scratchpad_desc();
      }
      ctx.request_scratch(st->scratch.get_size());
      ctx.set_state(st);
    });
  }

  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (const auto* st = static_cast<const SoftmaxState*>(ctx.state_ptr())) {
      dnnl_adapter::execute(
          st->prim, {{DNNL_ARG_SRC, st->md, x.raw()}, {DNNL_ARG_DST, st->md, ctx.output(0).raw()}},
          st->scratch, ctx.scratch());
      return;
    }
    const Extent e = extent(x.shape(), ctx.node());
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_floating_point_v<typename Compute<T>::type>) {
        ctx.error("needs floating-point input");
      } else {
        reference<T>(e, static_cast<const T*>(x.raw()), static_cast<T*>(ctx.output(0).raw()));
      }
    });
  }

 private:
  Extent extent(const Shape& x, const Node& node) const {
    const int64_t rank = static_cast<int64_t>(x.size());
    Extent e;
    if (rank == 0) return e;
    if (coerced_) {
      const int64_t axis = normalize_axis(axis_, rank, node, true);
      for (int64_t i = 0; i < rank; ++i) (i < axis ? e.outer : e.n) *= x[i];
      return e;
    }
    const int64_t axis = normalize_axis(axis_, rank, node);
    for (int64_t i = 0; i < rank; ++i) {
      if (i < axis)
        e.outer *= x[i];
      else if (i == axis)
        e.n = x[i];
      else
        e.inner *= x[i];
    }
    return e;
  }

  template <class T>
  void reference(const Extent& e, const T* x, T* y) const {
    using C = typename Compute<T>::type;
    parallel_for(e.outer * e.inner, e.outer * e.inner > 64, [&](int64_t oi) {
      const int64_t o = oi / e.inner, in = oi % e.inner;
      const int64_t base = o * e.n * e.inner + in;
      auto at = [&](int64_t j) { return static_cast<C>(x[base + j * e.inner]); };
      C mx = -std::numeric_limits<C>::infinity();
      int64_t arg = 0;
      for (int64_t j = 0; j < e.n; ++j)
        if (at(j) > mx) {
          mx = at(j);
          arg = j;
        }
      if (kind_ == SoftmaxKind::Hardmax) {
        for (int64_t j = 0; j < e.n; ++j)
          y[base + j * e.inner] = static_cast<T>(C(j == arg ? 1 : 0));
        return;
      }
      C sum = 0;
      for (int64_t j = 0; j < e.n; ++j) sum += std::exp(at(j) - mx);
      for (int64_t j = 0; j < e.n; ++j)
        y[base + j * e.inner] =
            static_cast<T>(kind_ == SoftmaxKind::Softmax ? std::exp(at(j) - mx) / sum
                                                         : at(j) - mx - std::log(sum));
    });
  }

  SoftmaxKind kind_;
  bool coerced_;
  int64_t axis_;
};

KernelDef softmax(const char* op, SoftmaxKind kind) {
  return {.op = op, .types = kFloatTypes, .create = [=](const Node& n) {
            return std::make_unique<Softmax>(n, kind);
          }};
}

}  // namespace

VOLT_REGISTER_KERNEL(softmax, softmax("Softmax", SoftmaxKind::Softmax));
VOLT_REGISTER_KERNEL(log_softmax, softmax("LogSoftmax", SoftmaxKind::LogSoftmax));
VOLT_REGISTER_KERNEL(hardmax, softmax("Hardmax", SoftmaxKind::Hardmax));

}  // namespace volt
