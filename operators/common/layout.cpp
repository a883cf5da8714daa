#include "operators/common/layout.hpp"
#include "operators/common/parallel.hpp"

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/shape_util.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {

bool channels_last(const Node& n) {
  const std::string l = n.attr_string("volt.layout", "NCHW");
  VOLT_CHECK(l == "NCHW" || l == "NHWC", InvalidModel,
             n.describe() + ": volt.layout must be NCHW or NHWC, got '" + l + "'");
  return l == "NHWC";
}

std::vector<int64_t> channels_last_perm(size_t rank) {
  std::vector<int64_t> p{0};
  for (size_t d = 2; d < rank; ++d) p.push_back(static_cast<int64_t>(d));
  p.push_back(1);
  return p;
}

std::vector<int64_t> channels_first_perm(size_t rank) {
  std::vector<int64_t> p{0, static_cast<int64_t>(rank) - 1};
  for (size_t d = 1; d + 1 < rank; ++d) p.push_back(static_cast<int64_t>(d));
  return p;
}

namespace {
Shape apply_perm(const Shape& s, const std::vector<int64_t>& perm) {
  Shape out;
  for (int64_t p : perm) out.push_back(s[p]);
  return out;
}
}  // namespace

Shape to_channels_first(const Shape& s) {
  VOLT_CHECK(s.size() >= 3, InvalidArgument,
             "a channels-last activation must have rank >= 3, got " + shape_str(s));
  return apply_perm(s, channels_first_perm(s.size()));
}

Shape to_channels_last(const Shape& s) {
  VOLT_CHECK(s.size() >= 3, InvalidArgument,
             "a channels-last activation must have rank >= 3, got " + shape_str(s));
  return apply_perm(s, channels_last_perm(s.size()));
}

Shape logical_shape(const Shape& stored, bool last, const Node& node) {
  if (!last) return stored;
  VOLT_CHECK(
      stored.size() >= 3, InvalidArgument,
      node.describe() + ": a channels-last input must have rank >= 3, got " + shape_str(stored));
  return to_channels_first(stored);
}

dnnl::memory::desc activation_md(const Shape& logical, dnnl::memory::data_type dt, bool last) {
  if (!last) return dnnl_adapter::plain_md(logical, dt);
  // Strides of the stored [N, d…, C] tensor, listed in logical order.
  const auto stored = strides_of(to_channels_last(logical));
  const size_t r = logical.size();
  std::vector<int64_t> strides(r);
  strides[0] = stored[0];
  strides[1] = stored[r - 1];
  for (size_t d = 2; d < r; ++d) strides[d] = stored[d - 1];
  return dnnl_adapter::strided_md(logical, strides, dt);
}

void permute_into(const Tensor& in, const std::vector<int64_t>& perm, Tensor& out) {
  const auto in_strides = strides_of(in.shape());
  std::vector<int64_t> strides;  // input stride for each output axis
  for (int64_t p : perm) strides.push_back(in_strides[p]);
  dispatch_any(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.raw());
    T* dst = static_cast<T*>(out.raw());
    const Shape& os = out.shape();
    const size_t r = os.size();
    if (r == 0 || out.numel() == 0) {
      if (out.numel()) dst[0] = src[0];
      return;
    }
    // Parallel over the outer output rows; the innermost axis is a strided gather.
    const int64_t inner = os[r - 1], inner_stride = strides[r - 1];
    const int64_t rows = out.numel() / inner;
    parallel_for(rows, out.numel() > 65536, [&](int64_t row) {
      int64_t rem = row, off = 0;
      for (size_t d = r - 1; d-- > 0;) {
        off += (rem % os[d]) * strides[d];
        rem /= os[d];
      }
      T* o = dst + row * inner;
      for (int64_t i = 0; i < inner; ++i) o[i] = src[off + i * inner_stride];
    });
  });
}

Tensor permuted(const Tensor& in, const std::vector<int64_t>& perm) {
  Tensor out = allocate_tensor(in.dtype(), apply_perm(in.shape(), perm));
  permute_into(in, perm, out);
  return out;
}

}  // namespace volt
