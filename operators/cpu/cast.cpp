// Cast (and CastLike): every numeric dtype, bool, float16/bfloat16 and strings.
#include <charconv>
#include <cmath>
#include <cstdio>

#include "operators/common/convert.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

template <class S>
std::string to_string_value(S v) {
  if constexpr (std::is_same_v<S, bool>) {
    return v ? "1" : "0";
  } else {
    using C = typename Compute<S>::type;
    const C c = static_cast<C>(v);
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(c)) return "NaN";
      if (std::isinf(c)) return c > 0 ? "INF" : "-INF";
      char buf[64];
      // Shortest representation that reads back exactly, like numpy's str().
      auto res = std::to_chars(buf, buf + sizeof buf, c);
      return std::string(buf, res.ptr);
    } else {
      return std::to_string(c);
    }
  }
}

template <class D>
D from_string_value(const std::string& s, const Node& node) {
  if constexpr (std::is_same_v<D, bool>) {
    return !(s.empty() || s == "0" || s == "false" || s == "False");
  } else {
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    VOLT_CHECK(end != s.c_str(), InvalidArgument,
               node.describe() + ": cannot convert '" + s + "' to a number");
    if constexpr (std::is_integral_v<D>)
      return convert<double, D>(d);
    else
      return convert<double, D>(d);
  }
}

class Cast final : public Kernel {
 public:
  explicit Cast(const Node& n, bool like) : like_(like) {
    if (!like) {
      const int64_t to = n.attr_int("to");
      VOLT_CHECK(dtype_is_valid(static_cast<int32_t>(to)), InvalidModel,
                 n.describe() + ": 'to' = " + std::to_string(to) + " is not a known dtype");
      to_ = static_cast<DType>(to);
    }
  }
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, like_ ? ctx.dtype(1) : to_, ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (x.dtype() != DType::String && y.dtype() != DType::String) return convert_elements(x, y);
    // Strings on one side (or both): parsed or printed element by element.
    const int64_t n = x.numel();
    const Node& node = ctx.node();
    if (x.dtype() == DType::String) {
      const auto* src = static_cast<const std::string*>(x.raw());
      dispatch_any(y.dtype(), [&](auto dt) {
        using D = typename decltype(dt)::type;
        D* dst = static_cast<D*>(y.raw());
        if constexpr (std::is_same_v<D, std::string>) {
          for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
        } else {
          for (int64_t i = 0; i < n; ++i) dst[i] = from_string_value<D>(src[i], node);
        }
      });
      return;
    }
    auto* dst = static_cast<std::string*>(y.raw());
    dispatch_any(x.dtype(), [&](auto st) {
      using S = typename decltype(st)::type;
      if constexpr (!std::is_same_v<S, std::string>) {
        const S* src = static_cast<const S*>(x.raw());
        for (int64_t i = 0; i < n; ++i) dst[i] = to_string_value<S>(src[i]);
      }
    });
  }

 private:
  bool like_;
  DType to_ = DType::Undefined;
};

}  // namespace

VOLT_REGISTER_KERNEL(cast, {.op = "Cast", .create = [](const Node& n) {
                              return std::make_unique<Cast>(n, false);
                            }});
VOLT_REGISTER_KERNEL(cast_like, {.op = "CastLike", .since = 15, .create = [](const Node& n) {
                                   return std::make_unique<Cast>(n, true);
                                 }});

}  // namespace volt
