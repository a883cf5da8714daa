// RNN, GRU and LSTM on oneDNN's primitives and LSTMs at small batches on volt's own loop
// (constant weights, fp32) against the reference loop in float64, in both directions and
// layouts, with initial states, biases, peepholes and linear_before_reset. fp32 through up to 20
// steps of a cell whose gates saturate: 2e-5 absolute on outputs in [-1, 1] (states of order 1;
// the own loop's tanh and sigmoid are within 1e-7 absolute).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "model_builder.hpp"
#include "operators/common/packed_weights.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

struct RnnCase {
  std::string op, direction;
  int64_t layout = 0;
  bool initial = false, bias = true, peepholes = false, lbr = false;
  std::string activation;  // RNN only
  bool sequence_lens = false;
  bool weights_fed = false;  // W, R, B, P graph inputs (as training feeds them), not constants
  int64_t batch = 3;         // LSTMs up to 4 run volt's own loop, past it oneDNN's primitive
  int64_t hidden = 6;
  std::vector<int64_t> lens;  // with sequence_lens: each batch row's (default: all full)
};

int64_t gates(const std::string& op) {
  return op == "LSTM" ? 4 : (op == "GRU" ? 3 : 1);
}

void add_constant(ModelBuilder& b, const std::string& name, const std::vector<int64_t>& dims,
                  const std::vector<double>& v, bool f64) {
  auto* t = b.proto().mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(f64 ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (double x : v) {
    if (f64)
      t->add_double_data(x);
    else
      t->add_float_data(static_cast<float>(x));
  }
}

struct Outputs {
  std::vector<std::vector<double>> values;  // Y, Y_h (and Y_c)
  std::string reference;                    // why the op ran its reference loop
  size_t packs = 0;                         // weights packed for oneDNN by the session
};

Outputs run_rnn(const RnnCase& c, bool f64) {
  constexpr int64_t seq = 7, in = 5;
  const int64_t batch = c.batch, h = c.hidden;
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, g = gates(c.op);
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> u(-0.6, 0.6);
  auto values = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = u(rng);
    return v;
  };
  const int elem = f64 ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT;
  ModelBuilder b(14);
  const std::vector<int64_t> xs =
      c.layout ? std::vector<int64_t>{batch, seq, in} : std::vector<int64_t>{seq, batch, in};
  const std::vector<int64_t> states =
      c.layout ? std::vector<int64_t>{batch, dirs, h} : std::vector<int64_t>{dirs, batch, h};
  b.input("x", elem, xs);  // fed, so that the node runs (constant inputs fold at plan time)
  add_constant(b, "W", {dirs, g * h, in}, values(dirs * g * h * in), f64);
  add_constant(b, "R", {dirs, g * h, h}, values(dirs * g * h * h), f64);
  std::vector<std::string> ins = {"x", "W", "R", "", "", "", "", ""};
  if (c.bias) {
    add_constant(b, "B", {dirs, 2 * g * h}, values(dirs * 2 * g * h), f64);
    ins[3] = "B";
  }
  if (c.sequence_lens) {
    b.initializer_i64(
        "lens64", {batch},
        c.lens.empty() ? std::vector<int64_t>(static_cast<size_t>(batch), seq) : c.lens);
    ins[4] = "lens";
  }
  if (c.initial) {
    b.input("h0", elem, states);
    ins[5] = "h0";
    if (c.op == "LSTM") {
      b.input("c0", elem, states);
      ins[6] = "c0";
    }
  }
  if (c.peepholes) {
    add_constant(b, "P", {dirs, 3 * h}, values(dirs * 3 * h), f64);
    ins[7] = "P";
  }
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  if (c.weights_fed)  // overridable initializers: values known only when the run starts
    for (const auto& w : {"W", "R", "B", "P"})
      for (const auto& t : b.proto().graph().initializer())
        if (t.name() == w) {
          std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
          b.input(w, elem, dims);
        }
  if (c.sequence_lens)
    b.node("Cast", {"lens64"}, {"lens"},
           [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "to", onnx::TensorProto::INT32); });
  std::vector<std::string> outs = {"y", "yh"};
  if (c.op == "LSTM") outs.push_back("yc");
  for (const auto& o : outs) b.output_any(o, elem);
  b.node(
      c.op, ins, outs,
      [&](onnx::NodeProto& n) {
        ModelBuilder::set_int(n, "hidden_size", h);
        ModelBuilder::set_string(n, "direction", c.direction);
        ModelBuilder::set_int(n, "layout", c.layout);
        if (c.lbr) ModelBuilder::set_int(n, "linear_before_reset", 1);
        if (!c.activation.empty()) {
          auto* a = n.add_attribute();
          a->set_name("activations");
          a->set_type(onnx::AttributeProto::STRINGS);
          for (int64_t d = 0; d < dirs; ++d) a->add_strings(c.activation);
        }
      },
      "rnn");
  const std::string bytes = b.bytes();
  const size_t packs_before = dnnl_adapter::packed_weights().packs();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  NamedValues feeds;
  const DType dt = f64 ? DType::Double : DType::Float;
  auto feed = [&](const std::string& name, const std::vector<int64_t>& dims) {
    Tensor t = Tensor::empty(dt, Shape(dims.begin(), dims.end()));
    const auto v = values(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (f64)
        t.data<double>()[i] = v[i];
      else
        t.data<float>()[i] = static_cast<float>(v[i]);
    }
    feeds.emplace_back(name, t);
  };
  feed("x", xs);
  if (c.initial) {
    for (const char* name : {"h0", "c0"}) {
      if (std::string(name) == "c0" && c.op != "LSTM") continue;
      feed(name, states);
    }
  }
  RunProfile profile;
  const auto result = s.run(feeds, {}, {.profile = &profile});
  Outputs out;
  out.packs = dnnl_adapter::packed_weights().packs() - packs_before;
  for (const ProfileEvent& e : profile.events)
    if (e.node == "rnn") out.reference = e.reference;
  for (const Value& v : result) {
    const Tensor& t = v.tensor();
    std::vector<double> d(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = f64 ? t.data<double>()[i] : t.data<float>()[i];
    out.values.push_back(d);
  }
  return out;
}

// Every output within 2e-5 of the float64 reference's (see the file's comment).
void expect_same_outputs(const Outputs& f32, const Outputs& f64, const std::string& what) {
  ASSERT_EQ(f32.values.size(), f64.values.size()) << what;
  for (size_t k = 0; k < f32.values.size(); ++k) {
    ASSERT_EQ(f32.values[k].size(), f64.values[k].size()) << what;
    for (size_t i = 0; i < f32.values[k].size(); ++i)
      ASSERT_NEAR(f32.values[k][i], f64.values[k][i], 2e-5) << what << " output " << k << " " << i;
  }
}

// (Sessions of two threads: bidirectional nodes over time-major data with constant weights run
// their two directions side by side, the others as one oneDNN primitive.)
TEST(Recurrent, OneDnnAgreesWithTheReference) {
  const std::vector<RnnCase> cases = {
      {"GRU", "bidirectional", 0, true, true, false, true},
      {"LSTM", "bidirectional", 0, false, false},
      {"LSTM", "forward"},
      {"LSTM", "reverse", 0, true},
      {"LSTM", "bidirectional", 0, true, true, true},
      {"LSTM", "bidirectional", 1, true, false},
      {"LSTM", "forward", 0, false, true, false, false, "", true},
      {"GRU", "forward", 0, true, true, false, true},
      {"GRU", "bidirectional", 1, true, true, false, false},
      {"GRU", "reverse", 0, false, true, false, true},
      {"RNN", "bidirectional", 0, true, true, false, false, "Tanh"},
      {"RNN", "forward", 1, false, true, false, false, "Relu"},
      {"LSTM", "bidirectional", 0, true, true, true, false, "", false, true},
      {"GRU", "reverse", 1, true, true, false, true, "", false, true},
      {"RNN", "forward", 0, true, false, false, false, "Tanh", false, true},
      // Past batch 4, LSTMs on oneDNN's primitive.
      {"LSTM", "bidirectional", 0, true, true, true, false, "", false, false, 6},
      {"LSTM", "reverse", 1, true, true, false, false, "", false, false, 6},
      {"LSTM", "forward", 0, false, true, false, false, "", false, true, 6},
  };
  for (const auto& c : cases) {
    const std::string what = c.op + " " + c.direction + " layout " + std::to_string(c.layout) +
                             (c.initial ? " initial" : "") + (c.peepholes ? " peepholes" : "") +
                             (c.lbr ? " lbr" : "") + (c.weights_fed ? " weights fed" : "");
    const Outputs f32 = run_rnn(c, false), f64 = run_rnn(c, true);
    EXPECT_EQ(f32.reference, "") << what;
    // (Constant weights are packed for oneDNN's primitive, never for the own loop.)
    // (GRU's own loop is for linear_before_reset in one direction; other GRUs stay on oneDNN's
    // primitive.)
    if (c.op == "LSTM" && !c.weights_fed) {
      EXPECT_EQ(f32.packs > 0, c.batch > 4) << what;
    }
    if (c.op == "GRU" && !c.weights_fed) {
      EXPECT_EQ(f32.packs > 0, c.batch > 4 || !c.lbr || c.direction == "bidirectional") << what;
    }
    EXPECT_FALSE(f64.reference.empty()) << what;
    expect_same_outputs(f32, f64, what);
  }
}

// LSTMs and linear-before-reset GRUs at batches up to 4 on volt's own loop: rows of different
// lengths (sequence_lens, which oneDNN's primitive does not take), hidden sizes that do not split
// into whole vectors across the two threads (40: 32 + 8 units), one hidden unit, a batch of 4,
// weights fed at run time.
TEST(Recurrent, SmallBatchCellsAgreeWithTheReference) {
  const std::vector<RnnCase> cases = {
      {"LSTM", "forward", 0, true, true, false, false, "", true, false, 3, 6, {7, 2, 0}},
      {"LSTM", "bidirectional", 1, true, true, true, false, "", true, false, 2, 6, {3, 7}},
      {"LSTM", "reverse", 0, false, true, true, false, "", true, false, 4, 40, {5, 7, 1, 6}},
      {"LSTM", "forward", 1, true, false, false, false, "", false, false, 1, 40},
      {"LSTM", "bidirectional", 0, true, true, false, false, "", false, false, 4, 1},
      {"LSTM", "forward", 0, true, true, true, false, "", false, true, 2, 33},
      // GRU with linear_before_reset (PyTorch's): the reset gate scales R_h h + Rb_h.
      {"GRU", "forward", 0, true, true, false, true, "", true, false, 3, 6, {7, 4, 0}},
      {"GRU", "forward", 1, true, true, false, true, "", false, false, 4, 40},
      {"GRU", "reverse", 0, false, true, false, true, "", false, true, 1, 17},
      {"GRU", "forward", 0, false, false, false, true, "", false, false, 2, 1},
  };
  for (const auto& c : cases) {
    const std::string what = c.op + " " + c.direction + " layout " + std::to_string(c.layout) +
                             " batch " + std::to_string(c.batch) + " hidden " +
                             std::to_string(c.hidden) + (c.sequence_lens ? " with lengths" : "") +
                             (c.weights_fed ? " weights fed" : "");
    const Outputs f32 = run_rnn(c, false), f64 = run_rnn(c, true);
    EXPECT_EQ(f32.reference, "") << what;
    EXPECT_EQ(f32.packs, 0u) << what << ": not on the own loop";
    expect_same_outputs(f32, f64, what);
  }
}

// What oneDNN does not compute stays on the reference loop, and says why.
TEST(Recurrent, UncomputedCellsStayOnTheReference) {
  EXPECT_NE(run_rnn({"RNN", "forward", 0, false, true, false, false, "Softsign"}, false).reference,
            "");
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// A new sequence length builds a plan; the LSTM's constant weights, brought into oneDNN's gate
// order and layout by the first plan, serve the next ones: packed once per session and weight
// format (the whole-sequence primitive and the chunks of later lengths share one on AVX-512; on
// AVX2 oneDNN picks its packed-gemm format for the chunks, a second pack), never per length. A
// length seen after another computes what a fresh session computes, within 1e-6 (the same
// arithmetic per step; bit-identical where both use one format, 1.5e-8 apart on AVX2).
TEST(Recurrent, PlansForNewLengthsShareTheWeights) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  const int64_t in = 6, h = 5;
  auto values = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) e = u(rng);
    return v;
  };
  ModelBuilder b;
  constexpr int64_t batch = 8;  // (past the own loop's batches: oneDNN's primitive packs W)
  b.input("x", 1, {-1, batch, in}).output("y", 1, {});
  b.initializer("W", {1, 4 * h, in}, values(4 * h * in))
      .initializer("R", {1, 4 * h, h}, values(4 * h * h))
      .initializer("B", {1, 8 * h}, values(8 * h));
  b.node("LSTM", {"x", "W", "R", "B"}, {"y"},
         [&](auto& n) { ModelBuilder::set_int(n, "hidden_size", h); });
  const std::string bytes = b.bytes();
  auto input = [&](int64_t t) {
    Tensor x = Tensor::empty(DType::Float, {t, batch, in});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    return x;
  };
  const Tensor x5 = input(5), x9 = input(9);
  Session fresh = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 1});
  const Tensor want = fresh.run({{"x", x9}})[0].tensor();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 1});
  const size_t before = dnnl_adapter::packed_weights().packs();
  s.run({{"x", x5}});
  const Tensor got = s.run({{"x", x9}})[0].tensor();
  const size_t packs = dnnl_adapter::packed_weights().packs() - before;
  EXPECT_GE(packs, 1u);
  EXPECT_LE(packs, 2u) << "the weights were prepared again for a new length";
  for (int64_t t : {7, 13, 70}) s.run({{"x", input(t)}});
  EXPECT_EQ(dnnl_adapter::packed_weights().packs() - before, packs)
      << "the weights were prepared again for a new length";
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-6) << "element " << i;
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// From a session's second sequence length on, a recurrent node runs as chunks of fixed lengths
// (64 and the powers of two below) on primitives kept for the session, each chunk's final
// state the next one's initial state, right-to-left directions over X in reverse time order (on
// the left-to-right primitives, shared by both directions). Every length, the chunks' output is
// what one primitive for the whole sequence computes (a fresh
// session): Y, Y_h and Y_c, bidirectional with initial states and peepholes, a reversed
// linear-before-reset GRU, an RNN. 1e-6: the same arithmetic per step (bit-identical on the
// development machine); chunks run out of order differ by 1e-5 on these weights.
TEST(Recurrent, NewLengthsRunAsChunksOfKeptPrimitives) {
  struct Case {
    std::string op, direction;
    bool initial, peepholes, lbr;
  };
  const std::vector<Case> cases = {{"LSTM", "bidirectional", true, true, false},
                                   {"LSTM", "forward", false, false, false},
                                   {"GRU", "reverse", true, false, true},
                                   {"RNN", "bidirectional", false, false, false}};
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  const int64_t in = 6, h = 5, batch = 6;  // (LSTMs past batch 4 run oneDNN's primitive)
  auto values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = u(rng);
    return v;
  };
  auto tensor = [&](const Shape& shape) {
    Tensor t = Tensor::empty(DType::Float, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    return t;
  };
  for (const Case& c : cases) {
    const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, g = gates(c.op);
    const bool lstm = c.op == "LSTM";
    ModelBuilder b;
    b.input("x", 1, {-1, batch, in});
    b.initializer("W", {dirs, g * h, in}, values(dirs * g * h * in))
        .initializer("R", {dirs, g * h, h}, values(dirs * g * h * h))
        .initializer("B", {dirs, 2 * g * h}, values(dirs * 2 * g * h));
    std::vector<std::string> ins = {"x", "W", "R", "B"};
    if (c.initial || c.peepholes) {
      ins.push_back("");
      ins.push_back(c.initial ? "h0" : "");
      if (lstm) ins.push_back(c.initial ? "c0" : "");
      if (c.initial) b.input("h0", 1, {dirs, batch, h});
      if (c.initial && lstm) b.input("c0", 1, {dirs, batch, h});
    }
    if (c.peepholes) {
      ins.push_back("P");
      b.initializer("P", {dirs, 3 * h}, values(dirs * 3 * h));
    }
    std::vector<std::string> outs = {"y", "yh"};
    if (lstm) outs.push_back("yc");
    for (const auto& o : outs) b.output_any(o, 1);
    b.node(c.op, ins, outs, [&](auto& n) {
      ModelBuilder::set_int(n, "hidden_size", h);
      ModelBuilder::set_string(n, "direction", c.direction);
      if (c.lbr) ModelBuilder::set_int(n, "linear_before_reset", 1);
    });
    const std::string bytes = b.bytes();
    Session varying = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    for (int64_t t : {3, 70, 1, 137, 64, 5}) {
      NamedValues feeds = {{"x", tensor({t, batch, in})}};
      if (c.initial) feeds.emplace_back("h0", tensor({dirs, batch, h}));
      if (c.initial && lstm) feeds.emplace_back("c0", tensor({dirs, batch, h}));
      Session fresh = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
      const auto want = fresh.run(feeds);
      RunProfile profile;
      const auto got = varying.run(feeds, {}, {.profile = &profile});
      for (const ProfileEvent& e : profile.events) EXPECT_EQ(e.reference, "") << c.op << " " << t;
      ASSERT_EQ(got.size(), want.size());
      for (size_t o = 0; o < got.size(); ++o) {
        const Tensor &gt = got[o].tensor(), &wt = want[o].tensor();
        ASSERT_EQ(gt.shape(), wt.shape()) << c.op << " " << c.direction << " length " << t;
        for (int64_t i = 0; i < gt.numel(); ++i)
          ASSERT_NEAR(gt.data<float>()[i], wt.data<float>()[i], 1e-6f)
              << c.op << " " << c.direction << " length " << t << " output " << o << " at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace volt
