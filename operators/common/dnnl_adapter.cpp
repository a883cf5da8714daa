#include "operators/common/dnnl_adapter.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "operators/common/packed_weights.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/strided_gather.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt::dnnl_adapter {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::memory::data_type to_dnnl(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::Float:
      return dt::f32;
    case DType::BFloat16:
      return dt::bf16;
    case DType::Float16:
      return dt::f16;
    case DType::Int8:
      return dt::s8;
    case DType::UInt8:
      return dt::u8;
    case DType::Int32:
      return dt::s32;
    default:
      return dt::undef;
  }
}

bool supported(DType t) {
  return to_dnnl(t) != dnnl::memory::data_type::undef;
}

dnnl::memory::desc plain_md(const Shape& shape, dnnl::memory::data_type dt) {
  if (shape.empty()) return dnnl::memory::desc({1}, dt, dnnl::memory::dims{1});
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()), dt, [&] {
    auto s = strides_of(shape);
    return dnnl::memory::dims(s.begin(), s.end());
  }());
}

dnnl::memory::desc strided_md(const Shape& shape, const std::vector<int64_t>& strides,
                              dnnl::memory::data_type dt) {
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()), dt,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

namespace {
// The marks of `runtime` that fall on dimensions `md` has.
uint32_t runtime_marks(const dnnl::memory::desc& md, uint32_t runtime) {
  return md.data.ndims >= 32 ? runtime : runtime & ((uint32_t{1} << md.data.ndims) - 1);
}
}  // namespace

dnnl::memory::desc with_runtime_dims(const dnnl::memory::desc& md, uint32_t runtime) {
  runtime = runtime_marks(md, runtime);
  if (!runtime) return md;
  const int r = md.data.ndims;
  const auto& strides = md.data.format_desc.blocking.strides;
  dnnl::memory::dims dims(md.data.dims, md.data.dims + r), kept(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    if (runtime >> i & 1) dims[static_cast<size_t>(i)] = DNNL_RUNTIME_DIM_VAL;
    kept[static_cast<size_t>(i)] = strides[i] == 1 ? 1 : DNNL_RUNTIME_DIM_VAL;
  }
  return dnnl::memory::desc(dims, md.data_type(), kept);
}

void append_md_key(std::string& key, const dnnl::memory::desc& md, uint32_t runtime) {
  runtime = runtime_marks(md, runtime);
  auto word = [&](int64_t w) { key.append(reinterpret_cast<const char*>(&w), sizeof w); };
  word(static_cast<int64_t>(md.data_type()));
  word(md.data.ndims);
  word(static_cast<int64_t>(runtime ? dnnl_blocked : md.data.format_kind));
  const auto& strides = md.data.format_desc.blocking.strides;
  for (int i = 0; i < md.data.ndims; ++i) {
    word(runtime >> i & 1 ? DNNL_RUNTIME_DIM_VAL : md.data.dims[i]);
    if (runtime)
      word(strides[i] == 1 ? 1 : DNNL_RUNTIME_DIM_VAL);
    else if (md.data.format_kind == dnnl_blocked)
      word(strides[i]);
  }
}

bool reorder_exists(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  try {
    return static_cast<bool>(
        dnnl::reorder::primitive_desc(engine(), from, engine(), to, dnnl::primitive_attr(), true));
  } catch (const dnnl::error&) {
    return false;
  }
}

namespace {

// dnnl::memory over existing data (no copy): for the one-off reorder below and for the
// per-thread cache that executions take their memory objects from.
dnnl::memory wrap(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, engine(), const_cast<void*>(data));
}

}  // namespace

void reorder_now(const dnnl::memory::desc& from_md, const void* from,
                 const dnnl::memory::desc& to_md, void* to) {
  dnnl::memory src = wrap(from_md, from), dst = wrap(to_md, to);
  dnnl::reorder(src, dst).execute(stream(), src, dst);
  stream().wait();
}

namespace {

// The strides of a plain (unblocked) descriptor with no offset; empty for anything else.
std::vector<int64_t> plain_strides(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || d.offset0 != 0)
    return {};
  return std::vector<int64_t>(d.format_desc.blocking.strides,
                              d.format_desc.blocking.strides + d.ndims);
}

// PreparedReorder's interleave: both layouts plain, 4-byte elements of one type, 2 to 4
// channels (axis 1), `to` dense in the order of its strides with the channels innermost and
// `from` holding them apart (planes). Fills the gather's output shape
// (to's dimensions in storage order, merged where contiguous) and input strides; false where it
// does not apply.
bool plan_interleave(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                     std::vector<int64_t>& shape, std::vector<int64_t>& strides) {
  const std::vector<int64_t> in = plain_strides(from), out = plain_strides(to);
  const dnnl::memory::dims dims = to.dims();
  if (in.empty() || out.empty() || from.dims() != dims || dims.size() < 3 ||
      from.data_type() != to.data_type() || dnnl::memory::data_type_size(to.data_type()) != 4 ||
      dims[1] < 2 || dims[1] > 4)
    return false;
  std::vector<size_t> order(dims.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return out[a] > out[b]; });
  if (order.back() != 1 || in[1] == 1) return false;  // into channels-last, from planes
  int64_t dense = 1;
  for (size_t k = order.size(); k-- > 0;) {
    if (dims[order[k]] != 1 && out[order[k]] != dense) return false;
    dense *= dims[order[k]];
  }
  shape.clear();
  strides.clear();
  for (size_t a : order) {
    shape.push_back(dims[a]);
    strides.push_back(in[a]);
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return false;  // (nothing to copy)
  merge_contiguous_axes(shape, strides);                                      // once, not per run
  return true;
}

}  // namespace

PreparedReorder::PreparedReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to)
    : from_md(from), to_md(to) {
  if (!plan_interleave(from, to, gather_shape, gather_strides))
    prim = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
}

PreparedReorder PreparedReorder::gather(std::vector<int64_t> shape, std::vector<int64_t> strides) {
  PreparedReorder r;
  merge_contiguous_axes(shape, strides);
  r.gather_shape = std::move(shape);
  r.gather_strides = std::move(strides);
  return r;
}

void PreparedReorder::operator()(const void* from, void* to) const {
  if (!gather_shape.empty())
    return strided_gather_merged(static_cast<const uint32_t*>(from), static_cast<uint32_t*>(to),
                                 gather_shape, gather_strides);
  execute(prim, {{DNNL_ARG_FROM, from_md, from}, {DNNL_ARG_TO, to_md, to}});
}

namespace {

// pack_constant and pack_constant_staged: `plain` over value's bytes into `packed`, through
// `staging` where given.
struct Staging {
  dnnl::memory::desc plain, as;  // plain in `plain`'s dimensions; the same bytes in `packed`'s

  Tensor buffer() const {  // (bytes: plain floats or whatever the staging layout holds)
    return allocate_tensor(DType::UInt8, {static_cast<int64_t>(plain.get_size())});
  }
};

Tensor pack(InferContext& ctx, size_t input, const Tensor& value, const dnnl::memory::desc& plain,
            const dnnl::memory::desc& packed, size_t byte_offset, const Staging* staging) {
  const void* data = static_cast<const char*>(value.raw()) + byte_offset;
  // A layout that is the value's own (oneDNN's gemm-based matmul often takes its weights as
  // plain rows): the primitive reads the model's tensor itself. Copying it made a second copy of
  // the weight, which the first plan then released from the graph and the session's second
  // input shape rebuilt by the reverse reorder, a weight at a time: GPT-2's step (22 MB of
  // weights) paid 27 ms of such copies at its first new past, and 6 ms at load for its
  // 256x8000 head.
  if (!staging && byte_offset == 0 && plain == packed && value.owner() &&
      plain.get_size() <= value.nbytes())
    return value;
  std::optional<Tensor> cached = packed_weights().find(data, value.owner(), plain, packed);
  Tensor copy;
  if (cached) {
    copy = std::move(*cached);
  } else {
    // (Lasting: a packed copy lives as long as the plans that share it.)
    copy = allocate_lasting_tensor(DType::UInt8, {static_cast<int64_t>(packed.get_size())});
    if (staging) {
      Tensor rows = staging->buffer();
      reorder_now(plain, data, staging->plain, rows.raw());
      reorder_now(staging->as, rows.raw(), packed, copy.raw());
    } else {
      reorder_now(plain, data, packed, copy.raw());
    }
    packed_weights().count_pack();
    packed_weights().remember(data, value.owner(), plain, packed, copy);
  }
  // The reverse reorder must rebuild the original: the same element type (or a bf16 copy of
  // fp32, rebuilt rounded: see CopyOfInput), `plain` covering the whole tensor (a strided view of
  // part of it would leave the rest unset), and a reorder oneDNN has from the packed format back
  // (it has none out of some, such as Winograd's weight layout on AVX-512). The rebuilt tensor is
  // remembered as this copy's source, so the plan built next (the reason for rebuilding it) finds
  // the copy instead of packing it again. (Only a session's first plan releases weights; generic
  // plans, which are never first, skip the check.)
  const bool exact = plain.data_type() == packed.data_type();
  const bool rounded = plain.data_type() == dnnl::memory::data_type::f32 &&
                       packed.data_type() == dnnl::memory::data_type::bf16;
  const bool back =
      staging ? reorder_exists(packed, staging->as) && reorder_exists(staging->plain, plain)
              : reorder_exists(packed, plain);
  // (A strided view of part of it can span as many bytes: its elements are counted too.)
  int64_t elements = 1;
  for (int64_t d : plain.dims()) elements *= d;
  const bool whole = plain.get_size() == value.nbytes() && elements == value.numel();
  if (byte_offset == 0 && (exact || rounded) && whole && !ctx.shapes_vary() && back) {
    std::optional<Staging> via;
    if (staging) via = *staging;
    ctx.keeps_copy_of_input(
        input, {[copy, plain, packed, via, dtype = value.dtype(), shape = value.shape()] {
                  Tensor original = allocate_lasting_tensor(dtype, shape);
                  if (via) {
                    Tensor rows = via->buffer();
                    reorder_now(packed, copy.raw(), via->as, rows.raw());
                    reorder_now(via->plain, rows.raw(), plain, original.raw());
                  } else {
                    reorder_now(packed, copy.raw(), plain, original.raw());
                  }
                  packed_weights().remember(original.raw(), original.owner(), plain, packed, copy);
                  return original;
                },
                exact});
  }
  return copy;
}

}  // namespace

Tensor pack_constant(InferContext& ctx, size_t input, const Tensor& value,
                     const dnnl::memory::desc& plain, const dnnl::memory::desc& packed,
                     size_t byte_offset) {
  return pack(ctx, input, value, plain, packed, byte_offset, nullptr);
}

Tensor pack_constant_staged(InferContext& ctx, size_t input, const Tensor& value,
                            const dnnl::memory::desc& view, const dnnl::memory::desc& staging,
                            const dnnl::memory::desc& staging_as,
                            const dnnl::memory::desc& packed) {
  const Staging via{staging, staging_as};
  return pack(ctx, input, value, view, packed, 0, &via);
}

dnnl::primitive_attr scratch_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

void Args::add(int arg, const dnnl::memory::desc& md, const void* data) {
  const Item item{arg, &md, const_cast<void*>(data)};
  for (size_t i = 0; i < count_; ++i)
    if (items_[i].arg == arg) {
      items_[i] = item;
      return;
    }
  VOLT_CHECK(count_ < kMax, Runtime, "more than 32 oneDNN execution arguments");
  items_[count_++] = item;
}

namespace {

// This thread's memory objects, one per (descriptor address, argument). The address alone could
// name another descriptor later (a plan's state freed, another allocated there): an object is
// made again when its own descriptor differs from the bytes there. Bounded: past kLimit entries
// (plans for many shapes) it starts over, between executions only (an execution's earlier
// arguments hold raw pointers to their objects).
class MemoryCache {
 public:
  void make_room() {
    if (entries_.size() > kLimit) entries_.clear();
  }
  dnnl_memory_t take(const dnnl::memory::desc& md, int arg, void* data) {
    dnnl::memory& kept = entries_[Key{&md, arg}];
    if (!kept || !made_for(kept, md)) {
      kept = wrap(md, data);
      return kept.get();
    }
    dnnl::error::wrap_c_api(dnnl_memory_set_data_handle_v2(kept.get(), data, stream().get()),
                            "could not set a memory object's data handle");
    return kept.get();
  }

 private:
  static constexpr size_t kLimit = 4096;
  struct Key {
    const void* md;
    int arg;
    bool operator==(const Key& o) const { return md == o.md && arg == o.arg; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.md) ^ (static_cast<size_t>(k.arg) * 0x9e3779b97f4a7c15ull);
    }
  };
  // Whether `memory` was made for the bytes `md` holds now. (Compared with the object's own
  // descriptor: a copy per entry was 700 bytes more of each new shape's first run.)
  static bool made_for(const dnnl::memory& memory, const dnnl::memory::desc& md) {
    const dnnl_memory_desc_t* own = nullptr;
    return dnnl_memory_get_memory_desc(memory.get(), &own) == dnnl_success && own &&
           std::memcmp(own, &md.data, sizeof md.data) == 0;
  }
  std::unordered_map<Key, dnnl::memory, KeyHash> entries_;
};

MemoryCache& memory_cache() {
  thread_local MemoryCache cache;
  return cache;
}

}  // namespace

void execute(const dnnl::primitive& p, const Args& args, const dnnl::memory::desc& scratch_md,
             void* scratch) {
  dnnl_exec_arg_t c_args[Args::kMax + 1];
  int n = 0;
  MemoryCache& cache = memory_cache();
  cache.make_room();
  for (const Args::Item& a : args) c_args[n++] = {a.arg, cache.take(*a.md, a.arg, a.data)};
  if (scratch_md.get_size() > 0)
    c_args[n++] = {DNNL_ARG_SCRATCHPAD, cache.take(scratch_md, DNNL_ARG_SCRATCHPAD, scratch)};
  dnnl::stream& s = stream();
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), s.get(), n, c_args),
                          "could not execute a primitive");
  s.wait();
}

void execute(const dnnl::primitive& p, const Args& args) {
  execute(p, args, dnnl::memory::desc(), nullptr);
}

Staged::Staged(const dnnl::memory::desc& plain_md, const dnnl::memory::desc& wanted_md, bool input,
               size_t& scratch_bytes)
    : plain(plain_md), wanted(wanted_md), needed(plain_md != wanted_md) {
  if (!needed) return;
  convert = input ? PreparedReorder(plain, wanted) : PreparedReorder(wanted, plain);
  offset = align64(scratch_bytes);
  scratch_bytes = offset + wanted.get_size();
}

const void* Staged::in(const void* data, void* scratch) const {
  if (!needed) return data;
  void* copy = static_cast<char*>(scratch) + offset;
  convert(data, copy);
  return copy;
}

void* Staged::out(void* data, void* scratch) const {
  return needed ? static_cast<char*>(scratch) + offset : data;
}

void Staged::finish(void* data, void* scratch) const {
  if (needed) convert(static_cast<char*>(scratch) + offset, data);
}

}  // namespace volt::dnnl_adapter
