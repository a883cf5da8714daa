#include "operators/common/convert.hpp"

#include "operators/common/parallel.hpp"
#include "runtime/error.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {

void convert_elements(const Tensor& src, Tensor& dst) {
  VOLT_CHECK(src.numel() == dst.numel(), Runtime,
             "convert_elements: " + std::to_string(src.numel()) + " elements into " +
                 std::to_string(dst.numel()));
  const int64_t n = src.numel();
  dispatch_any(src.dtype(), [&](auto st) {
    using S = typename decltype(st)::type;
    dispatch_any(dst.dtype(), [&](auto dt) {
      using D = typename decltype(dt)::type;
      if constexpr (std::is_same_v<S, std::string> || std::is_same_v<D, std::string>) {
        fail(ErrorCode::Runtime, "convert_elements: strings are Cast's to parse and print");
      } else {
        const S* from = static_cast<const S*>(src.raw());
        D* to = static_cast<D*>(dst.raw());
        parallel_chunks(n, 65536, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) to[i] = convert<S, D>(from[i]);
        });
      }
    });
  });
}

Tensor converted(const Tensor& src, DType dtype) {
  Tensor out = allocate_tensor(dtype, src.shape());
  convert_elements(src, out);
  return out;
}

}  // namespace volt
