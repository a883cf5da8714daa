#include "operators/common/layout.hpp"

#include <algorithm>

#include "operators/common/parallel.hpp"

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/strided_gather.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {

namespace {
StoredLayout layout_named(const std::string& l, const Node& n) {
  if (l == "NHWC") return StoredLayout::ChannelsLast;
  if (l == "NCHW16C") return StoredLayout::Blocked16;
  if (l == "NCHW8C") return StoredLayout::Blocked8;
  VOLT_CHECK(l == "NCHW", InvalidModel,
             n.describe() + ": volt.layout must be NCHW, NHWC, NCHW16C or NCHW8C, got '" + l + "'");
  return StoredLayout::ChannelsFirst;
}
}  // namespace

StoredLayout stored_layout(const Node& n) {
  return layout_named(n.attr_string("volt.layout", "NCHW"), n);
}

StoredLayout stored_input_layout(const Node& n) {
  return n.has_attr("volt.input_layout") ? layout_named(n.attr_string("volt.input_layout", ""), n)
                                         : stored_layout(n);
}

int64_t block_channels(StoredLayout layout) {
  return layout == StoredLayout::Blocked16 ? 16 : layout == StoredLayout::Blocked8 ? 8 : 0;
}

const char* blocked_layout_name(int64_t channels) {
  return channels == 16 ? "NCHW16C" : "NCHW8C";
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
std::vector<int64_t> identity_perm(size_t rank) {
  std::vector<int64_t> p(rank);
  for (size_t d = 0; d < rank; ++d) p[d] = static_cast<int64_t>(d);
  return p;
}

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

dnnl::memory::desc activation_md(const Shape& logical, dnnl::memory::data_type dt,
                                 StoredLayout layout) {
  if (layout == StoredLayout::ChannelsFirst) return dnnl_adapter::plain_md(logical, dt);
  if (const int64_t block = block_channels(layout)) {
    VOLT_CHECK(logical.size() == 4 && logical[1] % block == 0, InvalidArgument,
               "nChw" + std::to_string(block) + "c activations must be 4-D with channels a " +
                   "multiple of " + std::to_string(block) + ", got " + shape_str(logical));
    return dnnl::memory::desc(
        dnnl::memory::dims(logical.begin(), logical.end()), dt,
        block == 16 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c);
  }
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
  std::vector<int64_t> strides = permuted_strides(in.shape(), perm);
  dispatch_any(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_gather(static_cast<const T*>(in.raw()), static_cast<T*>(out.raw()), out.shape(),
                   std::move(strides));
  });
}

Tensor permuted(const Tensor& in, const std::vector<int64_t>& perm) {
  Tensor out = allocate_tensor(in.dtype(), apply_perm(in.shape(), perm));
  permute_into(in, perm, out);
  return out;
}

namespace {

// Between a channels-first tensor and its blocked storage, by oneDNN's reorder.
void reorder_blocked(const Tensor& from, StoredLayout layout, bool from_blocked, Tensor& to) {
  const auto dt = dnnl_adapter::to_dnnl(from.dtype());
  VOLT_CHECK(dt != dnnl::memory::data_type::undef, InvalidArgument,
             std::string("blocked activations of type ") + dtype_name(from.dtype()) +
                 " are not supported");
  const Shape& logical = from_blocked ? to.shape() : from.shape();
  const auto plain = dnnl_adapter::plain_md(logical, dt);
  const auto blocked = activation_md(logical, dt, layout);
  dnnl_adapter::reorder_now(from_blocked ? blocked : plain, from.raw(),
                            from_blocked ? plain : blocked, to.raw());
}

// Between a channels-first tensor and its storage in `layout`: into the storage where `store`.
void convert_layout(const Tensor& from, StoredLayout layout, bool store, Tensor& to) {
  const size_t r = from.rank();
  switch (layout) {
    case StoredLayout::ChannelsFirst:
      permute_into(from, identity_perm(r), to);
      return;
    case StoredLayout::ChannelsLast:
      permute_into(from, store ? channels_last_perm(r) : channels_first_perm(r), to);
      return;
    case StoredLayout::Blocked16:
    case StoredLayout::Blocked8:
      reorder_blocked(from, layout, !store, to);
      return;
  }
}

}  // namespace

void read_channels_first(const Tensor& stored, StoredLayout layout, Tensor& out) {
  convert_layout(stored, layout, false, out);
}

Tensor channels_first_copy(const Tensor& stored, StoredLayout layout) {
  if (layout == StoredLayout::ChannelsFirst) return stored;
  Tensor out = allocate_tensor(stored.dtype(), to_channels_first(stored.shape()));
  read_channels_first(stored, layout, out);
  return out;
}

void write_stored(const Tensor& channels_first, StoredLayout layout, Tensor& stored) {
  convert_layout(channels_first, layout, true, stored);
}

std::vector<int64_t> resolve_perm(const std::vector<int64_t>& perm, size_t rank, const Node& node) {
  if (perm.empty()) {
    std::vector<int64_t> p(rank);
    for (size_t i = 0; i < rank; ++i) p[i] = static_cast<int64_t>(rank - 1 - i);
    return p;
  }
  VOLT_CHECK(perm.size() == rank, InvalidArgument,
             node.describe() + ": perm has " + std::to_string(perm.size()) +
                 " entries for an input of rank " + std::to_string(rank));
  std::vector<char> seen(rank, 0);
  std::vector<int64_t> p;
  for (int64_t a : perm) {
    const int64_t ax = normalize_axis(a, static_cast<int64_t>(rank), node);
    VOLT_CHECK(!seen[ax], InvalidModel,
               node.describe() + ": perm repeats axis " + std::to_string(a));
    seen[ax] = 1;
    p.push_back(ax);
  }
  return p;
}

Shape permuted_shape(const Shape& shape, const std::vector<int64_t>& perm) {
  Shape out;
  for (int64_t p : perm) out.push_back(shape[static_cast<size_t>(p)]);
  return out;
}

std::vector<int64_t> permuted_strides(const Shape& shape, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> in = strides_of(shape);
  std::vector<int64_t> out;
  for (int64_t p : perm) out.push_back(in[static_cast<size_t>(p)]);
  return out;
}

std::vector<int64_t> logical_strides(const Shape& dims, const std::vector<int64_t>& perm) {
  if (perm.empty()) return strides_of(dims);
  const std::vector<int64_t> stored = strides_of(permuted_shape(dims, perm));
  std::vector<int64_t> strides(dims.size());
  for (size_t j = 0; j < perm.size(); ++j) strides[static_cast<size_t>(perm[j])] = stored[j];
  return strides;
}

}  // namespace volt
