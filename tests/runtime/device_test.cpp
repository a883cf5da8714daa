// The runtime's accelerator support — placement, copy nodes, device values, weights uploaded
// once per plan, streams — on a stand-in device whose memory is host memory, so that it runs on
// every machine, with or without CUDA. The stand-in knows which pointers are "device" memory,
// and the test kernels check that each kernel reads memory of its own side.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "model_builder.hpp"
#include "operators/registry.hpp"
#include "runtime/device.hpp"
#include "runtime/passes/passes.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

class StandInDevice final : public DeviceBackend {
 public:
  int device_count() const override { return 1; }
  std::string why_unavailable() const override { return "stand-in"; }
  void* allocate(int, size_t bytes, void*) override {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(p);
    return p;
  }
  void deallocate(int, void* p, size_t, void*) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.erase(p);
    }
    std::free(p);
  }
  void copy_to_device(int, void* dst, const void* src, size_t bytes, void*) override {
    EXPECT_TRUE(owns(dst) && !owns(src));
    std::memcpy(dst, src, bytes);
    ++to_device;
  }
  void copy_to_host(int, void* dst, const void* src, size_t bytes, void* stream) override {
    EXPECT_TRUE(owns(src) && !owns(dst));
    std::memcpy(dst, src, bytes);
    ++to_host;
    if (stream != &stream_token) ++to_host_off_stream;
  }
  void copy_on_device(int, void* dst, const void* src, size_t bytes, void*) override {
    std::memcpy(dst, src, bytes);
  }
  void* acquire_stream(int) override {
    ++streams;
    return &stream_token;
  }
  void release_stream(int, void*) noexcept override {}
  void synchronize(int, void*) override {}

  bool owns(const void* p) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(const_cast<void*>(p)) != 0;
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size();
  }

  std::atomic<int> to_device{0}, to_host{0}, streams{0};
  // Copies to the host on another stream than the run's: on CUDA such a copy (the legacy
  // default stream) does not wait for the run's non-blocking stream and reads stale memory.
  std::atomic<int> to_host_off_stream{0};
  int stream_token = 0;

 private:
  mutable std::mutex mutex_;
  std::set<void*> live_;
};

StandInDevice* g_device = nullptr;  // the installed stand-in, for the kernels below
std::atomic<int> g_wrong_side{0};   // kernels that were handed memory of the other side

const std::string kDomain = "test.device";

// y = 2x on either side; checks that x lives where the kernel runs.
class Twice final : public Kernel {
 public:
  Twice(const Node& n, bool on_device)
      : on_device_(on_device), decline_(n.attr_int("decline", 0) != 0) {}
  void infer(InferContext& ctx) const override {
    // A configuration the device kernel does not take: the host kernel runs it instead.
    if (on_device_ && decline_) throw KernelUnsupported{"declined on the device"};
    ctx.set_output(0, ctx.input(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const bool device_memory = g_device && g_device->owns(x.raw());
    if (device_memory != on_device_ || x.device().is_cpu() == on_device_ ||
        (on_device_ && ctx.stream() != &g_device->stream_token))
      ++g_wrong_side;
    const float* in = static_cast<const float*>(x.raw());
    float* out = static_cast<float*>(ctx.output(0).raw());
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = 2 * in[i];
  }

 private:
  bool on_device_;
  bool decline_;
};

// y = x + 1, host only.
class PlusOne final : public Kernel {
 public:
  explicit PlusOne(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.input(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (!x.device().is_cpu() || (g_device && g_device->owns(x.raw()))) ++g_wrong_side;
    const float* in = static_cast<const float*>(x.raw());
    float* out = static_cast<float*>(ctx.output(0).raw());
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] + 1;
  }
};

// z = x + w on the device (w a weight: uploaded at plan time).
class AddOnDevice final : public Kernel {
 public:
  explicit AddOnDevice(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.input(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    if (!g_device || !g_device->owns(x.raw()) || !g_device->owns(w.raw())) ++g_wrong_side;
    const float* a = static_cast<const float*>(x.raw());
    const float* b = static_cast<const float*>(w.raw());
    float* out = static_cast<float*>(ctx.output(0).raw());
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = a[i] + b[i];
  }
};

// y = x * s, on the device, with s read on the host (as Reshape reads its shape).
class ScaleByHostScalar final : public Kernel {
 public:
  explicit ScaleByHostScalar(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.input(0)); }
  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &s = ctx.input(1);
    if (!g_device || !g_device->owns(x.raw()) || g_device->owns(s.raw()) || !s.device().is_cpu())
      ++g_wrong_side;
    const float k = s.data<float>()[0];
    float* out = static_cast<float*>(ctx.output(0).raw());
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = k * static_cast<const float*>(x.raw())[i];
  }
};

VOLT_REGISTER_KERNEL(test_scale_cuda, {.domain = kDomain,
                                       .op = "Scale",
                                       .device = "cuda",
                                       .host_inputs = {1},
                                       .create = make_kernel<ScaleByHostScalar>});
VOLT_REGISTER_KERNEL(test_twice_cpu,
                     {.domain = kDomain, .op = "Twice", .create = [](const Node& n) {
                        return std::make_unique<Twice>(n, false);
                      }});
VOLT_REGISTER_KERNEL(test_twice_cuda,
                     {.domain = kDomain,
                      .op = "Twice",
                      .device = "cuda",
                      .create = [](const Node& n) { return std::make_unique<Twice>(n, true); }});
VOLT_REGISTER_KERNEL(test_plus_one,
                     {.domain = kDomain, .op = "PlusOne", .create = make_kernel<PlusOne>});
VOLT_REGISTER_KERNEL(test_add_cuda, {.domain = kDomain,
                                     .op = "AddW",
                                     .device = "cuda",
                                     .create = make_kernel<AddOnDevice>});

// Installs the stand-in as the CUDA backend for one test (the real one, if built, returns after).
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = set_device_backend(Device::Kind::Cuda, &device_);
    g_device = &device_;
    g_wrong_side = 0;
  }
  void TearDown() override {
    set_device_backend(Device::Kind::Cuda, previous_);
    g_device = nullptr;
  }
  StandInDevice device_;
  DeviceBackend* previous_ = nullptr;
};

// x -> Twice -> PlusOne (host only) -> Twice -> AddW(w) -> y, and Shape(first Twice's output).
std::string chain_model() {
  testing::ModelBuilder b;
  auto* op = b.proto().add_opset_import();
  op->set_domain(kDomain);
  op->set_version(1);
  b.input("x", 1, {2, 3})
      .initializer("w", {2, 3}, {10, 20, 30, 40, 50, 60})
      .output("y", 1, {2, 3})
      .output("s", 7, {2})
      .output("a", 1, {2, 3});
  auto custom = [&](const std::string& type, std::vector<std::string> ins, std::string out) {
    b.node(type, ins, {out});
    b.proto().mutable_graph()->mutable_node(b.proto().graph().node_size() - 1)->set_domain(kDomain);
  };
  custom("Twice", {"x"}, "a");
  b.node("Shape", {"a"}, {"s"});
  custom("PlusOne", {"a"}, "b");
  custom("Twice", {"b"}, "c");
  custom("AddW", {"c", "w"}, "y");
  return b.bytes();
}

int count_op(const Graph& g, const std::string& op) {
  int k = 0;
  for (const Node& n : g.nodes) k += n.op_type == op;
  return k;
}

TEST_F(DeviceTest, PlacementInsertsOneCopyPerCrossing) {
  // The registry's view of what the device runs: Twice, not PlusOne.
  Graph g;
  {
    Node twice;
    twice.op_type = "Twice";
    twice.domain = kDomain;
    twice.opset = 1;
    twice.inputs = {"x"};
    twice.outputs = {"a"};
    Node plus = twice;
    plus.op_type = "PlusOne";
    plus.inputs = {"a"};
    plus.outputs = {"b"};
    Node twice2 = twice;
    twice2.inputs = {"b"};
    twice2.outputs = {"c"};
    Node twice3 = twice;
    twice3.inputs = {"a"};  // a second device reader of a: no second copy
    twice3.outputs = {"d"};
    g.nodes = {twice, plus, twice2, twice3};
    g.inputs = {ValueInfo{.name = "x", .dtype = DType::Float}};
    g.outputs = {ValueInfo{.name = "c", .dtype = DType::Float},
                 ValueInfo{.name = "d", .dtype = DType::Float}};
  }
  const Graph placed = place_on_device(g, Device{Device::Kind::Cuda, 0});
  // x up; a down (PlusOne reads it); b up; c and d down (graph outputs keep their names).
  EXPECT_EQ(count_op(placed, "CopyToDevice"), 2);
  EXPECT_EQ(count_op(placed, "CopyToHost"), 3);
  for (const Node& n : placed.nodes) {
    const std::string expected = n.op_type == "Twice" || n.op_type == "CopyToDevice" ? "cuda" : "";
    EXPECT_EQ(n.device, expected) << n.op_type << " " << n.inputs[0];
  }
  for (const auto& out : placed.outputs) {
    bool made_by_copy = false;
    for (const Node& n : placed.nodes)
      made_by_copy |= n.op_type == "CopyToHost" && n.outputs[0] == out.name;
    EXPECT_TRUE(made_by_copy) << out.name;
  }
}

TEST_F(DeviceTest, RunsAcrossHostAndDeviceWithWeightsUploadedOncePerPlan) {
  const std::string bytes = chain_model();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:0"});
  const Tensor x = Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  for (int run = 0; run < 3; ++run) {
    auto out = s.run({{"x", x}});
    ASSERT_EQ(out.size(), 3u);
    const Tensor& y = out[0].tensor();
    ASSERT_TRUE(y.device().is_cpu());
    EXPECT_FALSE(device_.owns(y.raw()));
    const float w[] = {10, 20, 30, 40, 50, 60};
    for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], 2 * (2 * (i + 1) + 1) + w[i]);
    EXPECT_EQ(out[1].tensor().data<int64_t>()[0], 2);
    EXPECT_EQ(out[2].tensor().data<float>()[5], 12.f);
  }
  EXPECT_EQ(g_wrong_side.load(), 0);
  // Per run: x and b go up, a (twice: for PlusOne and as an output) and y come down once each.
  // The weight went up once, when the plan was built.
  EXPECT_EQ(device_.to_device.load(), 1 + 3 * 2);
  EXPECT_EQ(device_.to_host.load(), 3 * 2);
  EXPECT_EQ(device_.to_host_off_stream.load(), 0) << "copies to the host race the run's stream";
  EXPECT_EQ(device_.streams.load(), 3);
}

TEST_F(DeviceTest, InputsFedOnTheDeviceAreNotCopiedUp) {
  const std::string bytes = chain_model();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:0"});
  const Tensor x =
      Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3}).to(Device{Device::Kind::Cuda, 0});
  ASSERT_TRUE(device_.owns(x.raw()));
  s.run({{"x", x}});  // plan (uploads w)
  const int up = device_.to_device.load();
  auto out = s.run({{"x", x}});
  EXPECT_EQ(device_.to_device.load() - up, 1);  // only b, which PlusOne made on the host
  EXPECT_FLOAT_EQ(out[0].tensor().data<float>()[0], 2 * (2 * 1 + 1) + 10);
  EXPECT_EQ(g_wrong_side.load(), 0);
}

TEST_F(DeviceTest, DeviceTensorsFedToCpuSessionsAreReadFromTheHost) {
  testing::ModelBuilder b;
  b.input("x", 1, {3}).output("y", 1, {3}).node("Relu", {"x"}, {"y"});
  const std::string relu = b.bytes();
  Session s = Session::from_bytes(relu.data(), relu.size());
  const Tensor x = Tensor::from<float>({-1, 2, -3}, {3}).to(Device{Device::Kind::Cuda, 0});
  auto out = s.run({{"x", x}});
  EXPECT_TRUE(out[0].tensor().device().is_cpu());
  EXPECT_FLOAT_EQ(out[0].tensor().data<float>()[1], 2.f);
  EXPECT_EQ(out[0].tensor().data<float>()[0], 0.f);
}

TEST_F(DeviceTest, TensorsMoveAndCloneOnTheDevice) {
  const Tensor host = Tensor::from<float>({1, 2, 3}, {3});
  const Tensor dev = host.to(Device{Device::Kind::Cuda, 0});
  EXPECT_EQ(dev.device(), (Device{Device::Kind::Cuda, 0}));
  const Tensor copy = dev.clone();
  EXPECT_TRUE(device_.owns(copy.raw()));
  EXPECT_NE(copy.raw(), dev.raw());
  const Tensor back = copy.to(Device{});
  EXPECT_FLOAT_EQ(back.data<float>()[2], 3.f);
  EXPECT_EQ(dev.reshaped({1, 3}).device(), dev.device());
}

TEST_F(DeviceTest, NodesTheDeviceKernelDeclinesRunOnTheHost) {
  testing::ModelBuilder b;
  auto* op = b.proto().add_opset_import();
  op->set_domain(kDomain);
  op->set_version(1);
  b.input("x", 1, {2, 3}).initializer("w", {2, 3}, {1, 1, 1, 1, 1, 1}).output("y", 1, {2, 3});
  b.node("Twice", {"x"}, {"a"}, [](onnx::NodeProto& n) {
    n.set_domain(kDomain);
    testing::ModelBuilder::set_int(n, "decline", 1);
  });
  b.node("AddW", {"a", "w"}, {"y"}, [](onnx::NodeProto& n) { n.set_domain(kDomain); });
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:0"});
  for (int run = 0; run < 2; ++run) {
    auto out = s.run({{"x", Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3})}});
    for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out[0].tensor().data<float>()[i], 2 * (i + 1) + 1);
  }
  EXPECT_EQ(g_wrong_side.load(), 0);
}

TEST_F(DeviceTest, HostInputsOfDeviceKernelsStayOnTheHost) {
  testing::ModelBuilder b;
  auto* op = b.proto().add_opset_import();
  op->set_domain(kDomain);
  op->set_version(1);
  b.input("x", 1, {3}).initializer("k", {1}, {3}).output("y", 1, {3}).output("z", 1, {3});
  auto in_domain = [](onnx::NodeProto& n) { n.set_domain(kDomain); };
  b.node("Scale", {"x", "k"}, {"y"}, in_domain);   // k: an initializer, never uploaded
  b.node("Twice", {"k"}, {"k2"}, in_domain);       // made on the device ...
  b.node("Scale", {"x", "k2"}, {"z"}, in_domain);  // ... and read back on the host
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:0"});
  auto out = s.run({{"x", Tensor::from<float>({1, 2, 3}, {3})}});
  EXPECT_FLOAT_EQ(out[0].tensor().data<float>()[2], 9.f);
  EXPECT_FLOAT_EQ(out[1].tensor().data<float>()[2], 18.f);
  EXPECT_EQ(g_wrong_side.load(), 0);
}

// A CSR input compiles a variant of the graph (the sparse input densified, or multiplied as it
// is); on a device session the variant runs there too (it was compiled for the host's "cpu" and
// asked the device tool for a 'cpu' backend). (Test ops only: standard ones have real CUDA
// kernels once another test has loaded the plugin.)
TEST_F(DeviceTest, SparseInputsRunOnTheSessionsDevice) {
  testing::ModelBuilder b;
  auto* op = b.proto().add_opset_import();
  op->set_domain(kDomain);
  op->set_version(1);
  b.input("x", 1, {2, 3}).output("y", 1, {2, 3});
  auto in_domain = [](onnx::NodeProto& n) { n.set_domain(kDomain); };
  b.node("PlusOne", {"x"}, {"p"}, in_domain);
  b.node("Twice", {"p"}, {"y"}, in_domain);
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:0"});
  const Tensor x = Tensor::from<float>({1, 0, 2, 0, 3, 0}, {2, 3});
  const auto out = s.run({{"x", CsrTensor::from_dense(x)}});
  for (int i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(out[0].tensor().data<float>()[i], 2 * (x.data<float>()[i] + 1)) << i;
  EXPECT_EQ(g_wrong_side.load(), 0);
}

TEST(Device, ParsesNamesAndRefusesOthers) {
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  EXPECT_EQ(Device::parse("cuda"), (Device{Device::Kind::Cuda, 0}));
  EXPECT_EQ(Device::parse("cuda:3").index, 3);
  EXPECT_EQ(Device::parse("cuda:3").str(), "cuda:3");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "cuda:99999"})
    EXPECT_THROW(Device::parse(bad), Error) << bad;
}

TEST(Device, SessionOnAMissingDeviceSaysWhy) {
  testing::ModelBuilder b;
  b.input("x", 1, {3}).output("y", 1, {3}).node("Relu", {"x"}, {"y"});
  const std::string bytes = b.bytes();
  try {
    Session s = Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:7"});
    FAIL() << "a session on cuda:7 was created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Device);
    EXPECT_NE(std::string(e.what()).find("cuda:7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace volt
