// dnnl_adapter::execute reuses one memory object per (descriptor address, argument) and thread,
// setting only its data pointer. What must hold: a descriptor at an address where another one
// was (a plan's state freed, the next allocated there) gets a memory object of its own; two
// arguments with one descriptor get two; the cache starting over loses nothing.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "operators/common/dnnl_adapter.hpp"

namespace volt {
namespace {

using dnnl_adapter::engine;

// y = 2x + 1 over `md`'s elements.
dnnl::eltwise_forward affine(const dnnl::memory::desc& md) {
  const dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::eltwise_linear, md, 2.0f, 1.0f);
  return dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, engine()));
}

std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) - 3.0f;
  return v;
}

void expect_affine(const std::vector<float>& x, const std::vector<float>& y) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], 2.0f * x[i] + 1.0f) << "element " << i;
}

TEST(DnnlArgs, ADescriptorWhereAnotherWasGetsItsOwnMemory) {
  // A matmul whose M is left to execution time (as volt's shape-generic plans make them) takes
  // M from its arguments' descriptors: the memory objects must carry the current ones.
  using dt = dnnl::memory::data_type;
  const uint32_t runtime_m = 1;  // dimension 0
  const auto a_any =
      dnnl_adapter::with_runtime_dims(dnnl_adapter::plain_md({2, 3}, dt::f32), runtime_m);
  const auto b_md = dnnl_adapter::plain_md({3, 4}, dt::f32);
  const auto c_any =
      dnnl_adapter::with_runtime_dims(dnnl_adapter::plain_md({2, 4}, dt::f32), runtime_m);
  const dnnl::matmul prim(
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_any, b_md, c_any), engine()));
  const std::vector<float> b = iota_floats(12);
  for (int64_t m : {2, 5, 1, 5}) {
    // The same two variables (the same addresses) describe each M in turn, as the states of
    // plans freed and built again at one address would.
    static dnnl::memory::desc a_md, c_md;
    a_md = dnnl_adapter::plain_md({m, 3}, dt::f32);
    c_md = dnnl_adapter::plain_md({m, 4}, dt::f32);
    const std::vector<float> a = iota_floats(static_cast<size_t>(m * 3));
    std::vector<float> c(static_cast<size_t>(m * 4), -99.0f);
    dnnl_adapter::execute(prim, {{DNNL_ARG_SRC, a_md, a.data()},
                                 {DNNL_ARG_WEIGHTS, b_md, b.data()},
                                 {DNNL_ARG_DST, c_md, c.data()}});
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        float want = 0;
        for (int64_t k = 0; k < 3; ++k) want += a[i * 3 + k] * b[k * 4 + j];
        ASSERT_EQ(c[i * 4 + j], want) << "M " << m << ", row " << i << ", column " << j;
      }
  }
}

TEST(DnnlArgs, OneDescriptorForTwoArgumentsKeepsTheirBuffersApart) {
  const dnnl::memory::desc md = dnnl_adapter::plain_md({64}, dnnl::memory::data_type::f32);
  const auto prim = affine(md);
  const std::vector<float> x = iota_floats(64);
  for (int run = 0; run < 3; ++run) {  // later runs take the cached objects
    std::vector<float> in = x, out(64, -99.0f);
    dnnl_adapter::execute(prim, {{DNNL_ARG_SRC, md, in.data()}, {DNNL_ARG_DST, md, out.data()}});
    EXPECT_EQ(in, x) << "the source was written (run " << run << ")";
    expect_affine(x, out);
  }
}

TEST(DnnlArgs, ManyDescriptorsOutliveTheCacheStartingOver) {
  // More destination descriptors (each at an address of its own) than the cache holds, so it
  // starts over on the way; the source's one variable takes each size in turn, so each
  // execution's first argument reuses an object and only its second adds one: the start-over
  // must not come between them (the first's object would be gone by the execution).
  constexpr int kSizes = 64, kExecutions = 4500;
  std::vector<dnnl::eltwise_forward> prims;
  for (int64_t n = 1; n <= kSizes; ++n)
    prims.push_back(affine(dnnl_adapter::plain_md({n}, dnnl::memory::data_type::f32)));
  std::vector<dnnl::memory::desc> dst_mds;
  for (int i = 0; i < kExecutions; ++i)
    dst_mds.push_back(dnnl_adapter::plain_md({i % kSizes + 1}, dnnl::memory::data_type::f32));
  dnnl::memory::desc src_md;
  for (int i = 0; i < kExecutions; ++i) {
    const int64_t n = i % kSizes + 1;
    src_md = dnnl_adapter::plain_md({n}, dnnl::memory::data_type::f32);
    std::vector<float> x = iota_floats(static_cast<size_t>(n)), y(x.size());
    dnnl_adapter::execute(prims[static_cast<size_t>(n - 1)],
                          {{DNNL_ARG_SRC, src_md, x.data()}, {DNNL_ARG_DST, dst_mds[i], y.data()}});
    expect_affine(x, y);
  }
}

// PreparedReorder interleaves an image's few channel planes into channels-last itself (volt's
// strided_gather) and leaves every other reorder to oneDNN: element for element the same as
// oneDNN's reorder, for 2-4 channels (float and int32), 2-D and 3-D images, odd sizes, a batch,
// and the ways back and into blocks, which stay oneDNN's.
TEST(DnnlArgs, PreparedReorderInterleavesFewChannelsLikeOneDnn) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  struct Case {
    dnnl::memory::dims dims;
    tag from, to;
    dt type;
    bool interleaved;
  };
  const Case cases[] = {
      {{1, 3, 224, 224}, tag::nchw, tag::nhwc, dt::f32, true},
      {{2, 3, 7, 5}, tag::nchw, tag::nhwc, dt::f32, true},
      {{3, 2, 33, 9}, tag::nchw, tag::nhwc, dt::s32, true},
      {{1, 4, 1, 4099}, tag::nchw, tag::nhwc, dt::f32, true},
      {{2, 3, 4, 5, 6}, tag::ncdhw, tag::ndhwc, dt::f32, true},
      {{2, 3, 7, 5}, tag::nhwc, tag::nchw, dt::f32, false},     // planes out of pixels
      {{2, 8, 7, 5}, tag::nchw, tag::nhwc, dt::f32, false},     // many channels
      {{2, 3, 7, 5}, tag::nchw, tag::nChw16c, dt::f32, false},  // blocks
  };
  for (const Case& c : cases) {
    const dnnl::memory::desc from(c.dims, c.type, c.from), to(c.dims, c.type, c.to);
    std::vector<int32_t> x(from.get_size() / 4), want(to.get_size() / 4, -1), got(want);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i * 7 + 1);
    if (c.type == dt::f32)
      for (auto& v : x) v = std::bit_cast<int32_t>(static_cast<float>(v) * 0.5f);
    dnnl_adapter::reorder_now(from, x.data(), to, want.data());
    const dnnl_adapter::PreparedReorder prepared(from, to);
    EXPECT_EQ(!prepared.gather_shape.empty(), c.interleaved) << "case with dims[1] " << c.dims[1];
    prepared(x.data(), got.data());
    ASSERT_EQ(got, want) << "case with dims[1] " << c.dims[1];
  }
}

}  // namespace
}  // namespace volt
