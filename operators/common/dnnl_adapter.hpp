// The one place that talks to oneDNN's v2 API basics: the engine, per-thread streams, memory
// descriptors from volt shapes, and dnnl::error -> volt::Error. Moving to oneDNN v3 starts here.
#pragma once
#include <dnnl.hpp>

#include "operators/kernel.hpp"

namespace volt::dnnl_adapter {

dnnl::engine& engine();
dnnl::stream& stream();  // one per thread

// Plain (row-major) memory descriptor.
dnnl::memory::desc plain_md(const Shape& shape, dnnl::memory::data_type dt);
dnnl::memory::desc strided_md(const Shape& shape, const std::vector<int64_t>& strides,
                              dnnl::memory::data_type dt);
// `md` (plain or strided) with the dimensions marked in `runtime` left to execution time
// (DNNL_RUNTIME_DIM_VAL), and with them every stride but the unit ones, which depend on the
// dimensions: a primitive made on it serves every shape that agrees on the rest, executed on
// the shape's own descriptor. Unchanged when nothing is marked.
// (Bit i of `runtime` marks dimension i.)
dnnl::memory::desc with_runtime_dims(const dnnl::memory::desc& md, uint32_t runtime);
dnnl::memory::data_type to_dnnl(DType t);  // f32, bf16, f16, s8, u8, s32; undef otherwise
// A plain or strided descriptor as bytes (data type, dimensions, strides): for keys. With
// `runtime`, the bytes of with_runtime_dims(md, runtime), without making it.
void append_md_key(std::string& key, const dnnl::memory::desc& md, uint32_t runtime = 0);
bool supported(DType t);

// The arguments of one primitive execution, each a buffer as a descriptor describes it. The
// descriptors must outlive the execution (kernels keep theirs in their prepared state). execute()
// takes each argument's memory object from a per-thread cache, keyed by the descriptor's address
// and argument and checked against its bytes, and sets only its data pointer: making a
// dnnl::memory per argument and run (allocations and a descriptor copy), plus the map the C++
// API executes from, cost as much as the primitive itself on small tensors (an 8x64x64 Gemm in
// a Loop body: 13% of the run in dnnl_memory_create).
class Args {
 public:
  struct Given {
    int arg;
    const dnnl::memory::desc& md;
    const void* data;
  };
  Args() = default;
  Args(std::initializer_list<Given> args) {
    for (const Given& a : args) add(a.arg, a.md, a.data);
  }
  void add(int arg, const dnnl::memory::desc& md, const void* data);  // replaces `arg`'s

  struct Item {
    int arg;
    const dnnl::memory::desc* md;
    void* data;
  };
  static constexpr size_t kMax = 32;
  const Item* begin() const { return items_; }
  const Item* end() const { return items_ + count_; }

 private:
  Item items_[kMax];
  size_t count_ = 0;
};

// Primitive attributes with a user-managed scratchpad: the scratchpad comes from the run's
// arena, so primitives can run from several threads at once.
dnnl::primitive_attr scratch_attr();

// Runs `f`, turning dnnl::error into a volt::Error naming the node.
template <class F>
auto guarded(const Node& node, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) throw KernelUnsupported{std::string("oneDNN: ") + e.what()};
    fail(ErrorCode::Runtime, node.describe() + ": oneDNN: " + e.what());
  }
}

// Runs `prepare` (which builds the oneDNN state and sets it on `ctx`); when oneDNN cannot do
// this configuration, leaves no state so the kernel's reference loop runs instead.
template <class F>
void prepare_or_fall_back(InferContext& ctx, F&& prepare) {
  try {
    guarded(ctx.node(), [&] {
      prepare();
      return 0;
    });
  } catch (const KernelUnsupported&) {
  }
}

// Whether oneDNN chose its reference implementation ("ref:any"), a plain loop many times slower
// than its jit kernels: kernels then try other layouts, or say so (runs_reference_loop).
inline bool is_reference(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// Below this many elements, an elementwise primitive's fixed cost dominates: volt's loops run
// such tensors (KernelDef::min_elements).
constexpr int64_t kDnnlMinElements = 4096;

// Byte offsets of buffers in a kernel's scratch: 64-byte (cache line, AVX-512) aligned.
inline size_t align64(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

// Whether oneDNN can reorder data laid out as `from` into `to` (it cannot out of every format).
bool reorder_exists(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

// Reorders `from` (laid out as `from_md`) into `to` (`to_md`) now, on this thread's stream: for
// one-off conversions (weights at plan time, reference fallbacks), not per-run hot paths.
void reorder_now(const dnnl::memory::desc& from_md, const void* from,
                 const dnnl::memory::desc& to_md, void* to);

// A reorder made once (per plan) and run many times: `from` laid out as `from_md` into `to`.
// Between two plain layouts of a tensor with a few channels (a model's 3-channel image into a
// channels-last convolution), volt's strided_gather interleaves the channel planes at about
// three times the speed of oneDNN's reorder; other reorders are oneDNN's.
struct PreparedReorder {
  dnnl::reorder prim;
  dnnl::memory::desc from_md, to_md;
  // The interleave: `to`'s dimensions in its storage order and `from`'s strides along them,
  // merged once (empty: oneDNN's reorder).
  std::vector<int64_t> gather_shape, gather_strides;
  PreparedReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
  PreparedReorder() = default;
  // volt's strided_gather alone, no code generated: `to` (4-byte elements) in its storage order
  // as `shape`, read from `from` at `strides` along it (plans for several input shapes, where a
  // oneDNN reorder would be made for each shape).
  static PreparedReorder gather(std::vector<int64_t> shape, std::vector<int64_t> strides);
  void operator()(const void* from, void* to) const;
};

// Reorders constant input `input` (`value`, laid out as `plain`, which may start `byte_offset`
// bytes into it) into `packed`, the layout a primitive chose, once per session (plans share it).
// The kernel then tells the planner it keeps the copy (InferContext::keeps_copy_of_input), with
// the reverse reorder as the way back, so that the model's copy can be dropped: exact when both
// hold the same data type, rounded for a bf16 copy of fp32 weights (CopyOfInput). Where
// `packed` is `plain` itself (from the value's first byte), the value is returned as it is: no
// copy, and the model keeps its tensor.
Tensor pack_constant(InferContext& ctx, size_t input, const Tensor& value,
                     const dnnl::memory::desc& plain, const dnnl::memory::desc& packed,
                     size_t byte_offset = 0);

// The same for packed rows that permute value's in a way no strided view of it expresses in the
// packed layout's dimensions (oneDNN 2.6 does not split a blocked dimension): `view` (over
// value's bytes) is reordered into `staging` (plain, the same dimensions), whose bytes, read as
// `staging_as` (the packed layout's dimensions), are reordered into `packed`. Cached, shared by
// plans and released like pack_constant's copies, the way back through the same staging.
Tensor pack_constant_staged(InferContext& ctx, size_t input, const Tensor& value,
                            const dnnl::memory::desc& view, const dnnl::memory::desc& staging,
                            const dnnl::memory::desc& staging_as, const dnnl::memory::desc& packed);

// Executes a primitive with the scratchpad from the run context (none where `scratch_md` is
// empty), on this thread's stream, and waits for it.
void execute(const dnnl::primitive& p, const Args& args, const dnnl::memory::desc& scratch_md,
             void* scratch);
void execute(const dnnl::primitive& p, const Args& args);

// A tensor of the graph (plain layout) as a primitive wants it (the layout it chose from
// format_tag::any): when the two differ, a buffer in the run's scratch and a reorder into it (an
// input) or out of it (an output).
struct Staged {
  dnnl::memory::desc plain, wanted;
  PreparedReorder convert;
  size_t offset = 0;  // of the buffer in the scratch
  bool needed = false;

  // Plans the buffer at `scratch_bytes` (64-byte aligned) and grows it.
  Staged(const dnnl::memory::desc& plain_md, const dnnl::memory::desc& wanted_md, bool input,
         size_t& scratch_bytes);
  Staged() = default;
  // What the primitive reads (as `wanted`): `data` itself, or its reordered copy in the scratch.
  const void* in(const void* data, void* scratch) const;
  // Where the primitive writes (as `wanted`); finish() then moves it to `data` where staged.
  void* out(void* data, void* scratch) const;
  void finish(void* data, void* scratch) const;
};

}  // namespace volt::dnnl_adapter
