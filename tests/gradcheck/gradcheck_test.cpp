// Every gradient rule against central finite differences, in double precision, on awkward
// shapes (broadcast in several positions, batch 1 and 3, odd sizes). The checked function is
// L = sum(seed * y) with a random seed, so every element of dL/dy differs.
// Tolerance: h = 1e-6 gives O(h^2) truncation and O(eps/h) rounding, about 1e-9 relative for
// these smooth functions; 1e-6 leaves a margin of a thousand.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "operators/grad/gradient_rule.hpp"
#include "operators/op_runner.hpp"
#include "operators/registry.hpp"
#include "runtime/graph_runner.hpp"
#include "runtime/training/autodiff.hpp"

namespace volt {
namespace {

using testing::AttrFn;
using testing::ModelBuilder;

struct Case {
  std::string op;
  std::vector<Tensor> inputs;  // float64 (int64 for index inputs)
  std::vector<size_t> wrt;
  AttrFn attrs = {};
  int opset = 13;
  size_t outputs = 1;  // the checked one is the first
};

std::vector<Value> run_graph(const Graph& g, const NamedValues& feeds) {
  GraphRunner r(std::make_shared<const Graph>(g), "gradcheck", "cpu", 1);
  std::vector<const Value*> fed(r.compiled().names.size(), nullptr);
  for (const auto& [name, v] : feeds) fed[r.compiled().id(name)] = &v;
  return r.run(fed);
}

double loss_of(const Graph& g, const NamedValues& feeds, const Tensor& seed) {
  const Tensor y = run_graph(g, feeds)[0].tensor();
  double l = 0;
  for (int64_t i = 0; i < y.numel(); ++i) l += y.data<double>()[i] * seed.data<double>()[i];
  return l;
}

// The ops checked here, for the enumeration test at the end, which runs every group with
// `recording` set: check() then notes the op and returns.
std::set<std::string>& checked_ops() {
  static std::set<std::string> ops;
  return ops;
}
bool recording = false;
std::vector<void (*)()>& groups() {
  static std::vector<void (*)()> g;
  return g;
}
// A test of finite-difference checks, also run (recording) by the enumeration test.
#define GRADCHECK(name)                                                     \
  void name##_cases();                                                      \
  const bool name##_registered = (groups().push_back(&name##_cases), true); \
  TEST(Gradcheck, name) {                                                   \
    name##_cases();                                                         \
  }                                                                         \
  void name##_cases()

// The model's output "y" (float64) against finite differences in each `wrt` feed.
void check_model(const std::string& bytes, const NamedValues& feeds,
                 const std::vector<size_t>& wrt) {
  const Model m = load_model_from_bytes(bytes.data(), bytes.size());
  const Graph forward = m.graph;
  const Tensor y = run_graph(forward, feeds)[0].tensor();
  std::mt19937 rng(99);
  const Tensor seed = testing::random_double(y.shape(), rng);

  Graph g = forward;
  ValueInfo seed_info;
  seed_info.name = "seed";
  seed_info.dtype = DType::Double;
  g.inputs.push_back(seed_info);
  GradientRequest req{"y", "seed", {}};
  for (size_t w : wrt) req.wrt.push_back(feeds[w].first);
  const auto grads = append_gradients(g, req, "gradcheck");
  g.outputs.clear();
  for (const auto& gname : grads) {
    ValueInfo o;
    o.name = gname;
    g.outputs.push_back(o);
  }
  NamedValues with_seed = feeds;
  with_seed.emplace_back("seed", seed);
  const auto analytic = run_graph(g, with_seed);

  const double h = 1e-6;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const Tensor& x = feeds[wrt[k]].second.tensor();
    const Tensor& a = analytic[k].tensor();
    ASSERT_EQ(a.shape(), x.shape()) << "gradient of input " << wrt[k];
    for (int64_t e = 0; e < x.numel(); ++e) {
      NamedValues plus = feeds, minus = feeds;
      Tensor xp = x.clone(), xm = x.clone();
      xp.data<double>()[e] += h;
      xm.data<double>()[e] -= h;
      plus[wrt[k]].second = xp;
      minus[wrt[k]].second = xm;
      const double numeric =
          (loss_of(forward, plus, seed) - loss_of(forward, minus, seed)) / (2 * h);
      const double got = a.data<double>()[e];
      EXPECT_NEAR(got, numeric, 1e-6 * (1 + std::abs(numeric)))
          << "input " << wrt[k] << " element " << e;
    }
  }
}

// One node of `c.op` over graph inputs in0, in1, ...
void check(const Case& c) {
  SCOPED_TRACE(c.op);
  checked_ops().insert(c.op);
  if (recording) return;
  ModelBuilder b(c.opset, 10);
  std::vector<std::string> names;
  NamedValues feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    names.push_back("in" + std::to_string(i));
    b.input_any(names.back(), static_cast<int>(c.inputs[i].dtype()));
    feeds.emplace_back(names.back(), c.inputs[i]);
  }
  std::vector<std::string> outs{"y"};
  for (size_t i = 1; i < c.outputs; ++i) outs.push_back("y" + std::to_string(i));
  b.output_any("y", 11).node(c.op, names, outs, c.attrs, "op");
  check_model(b.bytes(), feeds, c.wrt);
}

Tensor rnd(const Shape& s, double lo = -1, double hi = 1, unsigned seed = 1) {
  std::mt19937 rng(seed);
  return testing::random_double(s, rng, lo, hi);
}

GRADCHECK(BroadcastingBinaryOps) {
  for (const std::string op : {"Add", "Sub", "Mul", "Div"}) {
    check({op, {rnd({3, 1, 4}, 0.5, 2, 1), rnd({5, 4}, 0.5, 2, 2)}, {0, 1}});
    check({op, {rnd({1}, 0.5, 2, 3), rnd({2, 3}, 0.5, 2, 4)}, {0, 1}});
  }
  check({"Pow", {rnd({2, 3}, 0.5, 2, 5), rnd({3}, -1, 2, 6)}, {0, 1}});
  check({"Sum", {rnd({2, 3}), rnd({3}, -1, 1, 7), rnd({2, 1}, -1, 1, 8)}, {0, 1, 2}});
}

GRADCHECK(UnaryOps) {
  const Tensor x = rnd({2, 3, 5}, -2, 2, 9), pos = rnd({2, 3, 5}, 0.2, 3, 10);
  for (const std::string op :
       {"Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Softplus", "Abs", "Sin", "Cos", "Elu"})
    check({op, {x}, {0}});
  check({"LeakyRelu", {x}, {0}, [](auto& n) { ModelBuilder::set_float(n, "alpha", 0.3f); }});
  for (const std::string op : {"Log", "Sqrt", "Reciprocal"}) check({op, {pos}, {0}});
  check({"Gelu", {x}, {0}, {}, 20});
  check(
      {"Gelu", {x}, {0}, [](auto& n) { ModelBuilder::set_string(n, "approximate", "tanh"); }, 20});
  check({"Clip",
         {x},
         {0},
         [](auto& n) {
           ModelBuilder::set_float(n, "min", -0.5f);
           ModelBuilder::set_float(n, "max", 0.7f);
         },
         6});
}

GRADCHECK(MatMulAndGemm) {
  check({"MatMul", {rnd({3, 1, 5, 4}, -1, 1, 11), rnd({2, 4, 3}, -1, 1, 12)}, {0, 1}});
  check({"MatMul", {rnd({4}, -1, 1, 13), rnd({3, 4, 2}, -1, 1, 14)}, {0, 1}});
  check({"Det", {rnd({2, 3, 3}, -1, 1, 113)}, {0}, {}, 11});
  check({"Det", {rnd({4, 4}, -1, 1, 114)}, {0}, {}, 11});
  check({"Det",
         {Tensor::from<double>({1, 2, 3, 2, 4, 6, 0.5, -1, 2}, {3, 3})},
         {0},
         {},
         11});  // singular
  auto equation = [](const std::string& eq) {
    return [=](onnx::NodeProto& n) { ModelBuilder::set_string(n, "equation", eq); };
  };
  check({"Einsum",
         {rnd({2, 3}, -1, 1, 102), rnd({3, 4}, -1, 1, 103)},
         {0, 1},
         equation("ij,jk->ik"),
         12});
  check({"Einsum",
         {rnd({2, 5, 3}, -1, 1, 104), rnd({2, 4, 3}, -1, 1, 105)},
         {0, 1},
         equation("bqd, bkd -> bqk"),
         12});  // attention scores
  check({"Einsum",
         {rnd({2, 3, 4}, -1, 1, 106), rnd({4}, -1, 1, 107)},
         {0, 1},
         equation("abc,c->b"),
         12});  // a summed only in the first operand
  check({"Einsum",
         {rnd({3, 4}, -1, 1, 108), rnd({4, 2}, -1, 1, 109), rnd({2}, -1, 1, 110)},
         {0, 1, 2},
         equation("ij,jk,k"),
         12});  // implicit output
  check({"Einsum",
         {rnd({2, 3, 4}, -1, 1, 111), rnd({4, 5}, -1, 1, 112)},
         {0, 1},
         equation("...k,kl->...l"),
         12});
  check({"MatMul", {rnd({2, 5, 4}, -1, 1, 15), rnd({4}, -1, 1, 16)}, {0, 1}});
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      const Tensor a = rnd(ta ? Shape{4, 3} : Shape{3, 4}, -1, 1, 17),
                   bb = rnd(tb ? Shape{5, 4} : Shape{4, 5}, -1, 1, 18);
      check({"Gemm", {a, bb, rnd({5}, -1, 1, 19)}, {0, 1, 2}, [=](auto& n) {
               ModelBuilder::set_int(n, "transA", ta);
               ModelBuilder::set_int(n, "transB", tb);
               ModelBuilder::set_float(n, "alpha", 0.7f);
               ModelBuilder::set_float(n, "beta", 1.3f);
             }});
    }
}

GRADCHECK(ShapeOps) {
  const Tensor x = rnd({2, 3, 4}, -1, 1, 20);
  check({"Identity", {x}, {0}});
  check({"Flatten", {x}, {0}, [](auto& n) { ModelBuilder::set_int(n, "axis", 2); }});
  check({"Transpose", {x}, {0}, [](auto& n) { ModelBuilder::set_ints(n, "perm", {1, 2, 0}); }});
  check({"Transpose", {x}, {0}});
  check(
      {"Concat", {x, rnd({2, 1, 4}, -1, 1, 21), rnd({2, 2, 4}, -1, 1, 22)}, {0, 1, 2}, [](auto& n) {
         ModelBuilder::set_int(n, "axis", 1);
       }});
  check({"Squeeze",
         {rnd({2, 1, 3}, -1, 1, 23)},
         {0},
         [](auto& n) { ModelBuilder::set_ints(n, "axes", {1}); },
         11});
  check({"Unsqueeze", {x}, {0}, [](auto& n) { ModelBuilder::set_ints(n, "axes", {0, 3}); }, 11});
  check({"Reshape", {x, Tensor::from<int64_t>({4, -1}, {2})}, {0}});
  check({"Expand", {rnd({3, 1}, -1, 1, 24), Tensor::from<int64_t>({2, 3, 4}, {3})}, {0}});
  check({"Gather", {rnd({5, 3}, -1, 1, 25), Tensor::from<int64_t>({4, 0, 4, -1, 2}, {5})}, {0}});
  check({"Gather",
         {rnd({2, 5, 3}, -1, 1, 26), Tensor::from<int64_t>({1, 1, 3}, {3})},
         {0},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 1); }});
  check({"Cast", {x}, {0}, [](auto& n) { ModelBuilder::set_int(n, "to", 11); }});
}

GRADCHECK(ReductionsSoftmaxAndLosses) {
  const Tensor x = rnd({3, 4, 5}, -2, 2, 27);
  for (int keep : {0, 1}) {
    check({"ReduceSum", {x, Tensor::from<int64_t>({-1, 0}, {2})}, {0}, [=](auto& n) {
             ModelBuilder::set_int(n, "keepdims", keep);
           }});
    check({"ReduceMean", {x}, {0}, [=](auto& n) {
             ModelBuilder::set_ints(n, "axes", {1});
             ModelBuilder::set_int(n, "keepdims", keep);
           }});
  }
  check({"ReduceSum", {x}, {0}});
  for (const std::string op : {"Softmax", "LogSoftmax"}) {
    check({op, {x}, {0}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); }});
    check({op,
           {x},
           {0},
           [](auto& n) { ModelBuilder::set_int(n, "axis", 1); },
           11});  // coerced to 2-D
  }
  const Tensor scores = rnd({3, 5, 2}, -2, 2, 28);
  const Tensor labels = Tensor::from<int64_t>({0, 4, 2, 2, 1, 3}, {3, 2});
  for (const std::string reduction : {"mean", "sum", "none"}) {
    check({"SoftmaxCrossEntropyLoss", {scores, labels}, {0}, [=](auto& n) {
             ModelBuilder::set_string(n, "reduction", reduction);
           }});
    check({"SoftmaxCrossEntropyLoss", {scores, labels, rnd({5}, 0.5, 2, 29)}, {0}, [=](auto& n) {
             ModelBuilder::set_string(n, "reduction", reduction);
             ModelBuilder::set_int(n, "ignore_index", 2);
           }});
    check({"NegativeLogLikelihoodLoss", {scores, labels, rnd({5}, 0.5, 2, 30)}, {0}, [=](auto& n) {
             ModelBuilder::set_string(n, "reduction", reduction);
           }});
  }
}

GRADCHECK(WhereAndDropout) {
  const Tensor cond = Tensor::from<bool>({true, false, true, false, false, true}, {2, 3});
  check({"Where", {cond, rnd({2, 3}, -1, 1, 31), rnd({3}, -1, 1, 32)}, {1, 2}});
  check({"Dropout", {rnd({2, 3}, -1, 1, 33)}, {0}});
}

GRADCHECK(ConvolutionAndPooling) {
  auto window = [](std::vector<int64_t> strides, std::vector<int64_t> pads,
                   std::vector<int64_t> dil, int64_t group) {
    return [=](onnx::NodeProto& n) {
      ModelBuilder::set_ints(n, "strides", strides);
      ModelBuilder::set_ints(n, "pads", pads);
      ModelBuilder::set_ints(n, "dilations", dil);
      ModelBuilder::set_int(n, "group", group);
    };
  };
  check({"Conv",
         {rnd({2, 3, 6, 5}, -1, 1, 40), rnd({4, 3, 3, 2}, -1, 1, 41), rnd({4}, -1, 1, 42)},
         {0, 1, 2},
         window({2, 1}, {1, 0, 0, 1}, {1, 2}, 1)});
  check({"Conv",
         {rnd({1, 4, 7}, -1, 1, 43), rnd({6, 2, 3}, -1, 1, 44)},
         {0, 1},
         window({2}, {1, 1}, {1}, 2)});
  check({"ConvTranspose",
         {rnd({1, 2, 3, 4}, -1, 1, 45), rnd({2, 3, 2, 3}, -1, 1, 46), rnd({3}, -1, 1, 47)},
         {0, 1, 2},
         [](onnx::NodeProto& n) {
           ModelBuilder::set_ints(n, "strides", {2, 1});
           ModelBuilder::set_ints(n, "pads", {0, 1, 1, 0});
         }});
  const Tensor x = rnd({2, 3, 7, 6}, -1, 1, 48);
  check({"MaxPool", {x}, {0}, [](onnx::NodeProto& n) {
           ModelBuilder::set_ints(n, "kernel_shape", {3, 2});
           ModelBuilder::set_ints(n, "strides", {2, 2});
           ModelBuilder::set_ints(n, "pads", {1, 0, 1, 1});
         }});
  check({"MaxPool", {x}, {0}, [](onnx::NodeProto& n) {
           ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
           ModelBuilder::set_ints(n, "dilations", {2, 1});
           ModelBuilder::set_ints(n, "pads", {0, 1, 1, 0});
         }});
  for (int include : {0, 1})
    check({"AveragePool", {x}, {0}, [=](onnx::NodeProto& n) {
             ModelBuilder::set_ints(n, "kernel_shape", {3, 3});
             ModelBuilder::set_ints(n, "strides", {2, 2});
             ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
             ModelBuilder::set_int(n, "count_include_pad", include);
             ModelBuilder::set_int(n, "ceil_mode", 1);
           }});
  check({"GlobalAveragePool", {x}, {0}});
  for (int64_t p : {1, 2, 3}) {
    check(
        {"GlobalLpPool", {x}, {0}, [=](onnx::NodeProto& n) { ModelBuilder::set_int(n, "p", p); }});
    check({"LpPool", {x}, {0}, [=](onnx::NodeProto& n) {
             ModelBuilder::set_int(n, "p", p);
             ModelBuilder::set_ints(n, "kernel_shape", {3, 2});
             ModelBuilder::set_ints(n, "strides", {2, 1});
             ModelBuilder::set_ints(n, "pads", {1, 0, 1, 1});
           }});
  }
  // GridSample: every mode and padding, corners aligned or not, a grid reaching outside.
  for (const std::string mode : {"bilinear", "nearest", "bicubic"})
    for (const std::string padding : {"zeros", "border", "reflection"})
      for (int64_t align : {0, 1})
        check({"GridSample",
               {rnd({2, 3, 4, 5}, -1, 1, 150), rnd({2, 3, 2, 2}, -1.3, 1.3, 151)},
               {0},
               [=](onnx::NodeProto& n) {
                 ModelBuilder::set_string(n, "mode", mode);
                 ModelBuilder::set_string(n, "padding_mode", padding);
                 ModelBuilder::set_int(n, "align_corners", align);
               },
               16});
  // Indices as MaxPool gives them (flat over the whole output), distinct.
  check({"MaxUnpool",
         {rnd({1, 2, 2, 2}, -1, 1, 49),
          Tensor::from<int64_t>({0, 3, 9, 14, 17, 20, 26, 31}, {1, 2, 2, 2})},
         {0},
         [](onnx::NodeProto& n) {
           ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
           ModelBuilder::set_ints(n, "strides", {2, 2});
         },
         11});
  check({"GlobalMaxPool", {x}, {0}});
}

GRADCHECK(Normalization) {
  const Tensor x = rnd({3, 4, 2, 3}, -2, 2, 50);
  const Tensor scale = rnd({4}, 0.5, 1.5, 51), bias = rnd({4}, -1, 1, 52),
               mean = rnd({4}, -1, 1, 53), var = rnd({4}, 0.5, 2, 54);
  check({"BatchNormalization",
         {x, scale, bias, mean, var},
         {0, 1, 2},
         [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "training_mode", 1); },
         15});
  check({"BatchNormalization", {x, scale, bias, mean, var}, {0, 1, 2}, {}, 15});
  check({"LayerNormalization",
         {rnd({3, 5, 4}, -2, 2, 55), rnd({4}, 0.5, 1.5, 56), rnd({4}, -1, 1, 57)},
         {0, 1, 2},
         {},
         17});
  check({"InstanceNormalization", {x, scale, bias}, {0, 1, 2}});
  check({"InstanceNormalization",
         {rnd({2, 3, 5}, -2, 2, 63), rnd({3}, 0.5, 1.5, 64), rnd({3}, -1, 1, 65)},
         {0, 1, 2}});
  check({"MeanVarianceNormalization", {x}, {0}});
  for (int64_t size : {3, 4})
    check({"LRN", {rnd({2, 5, 3, 2}, -2, 2, 66)}, {0}, [=](onnx::NodeProto& n) {
             ModelBuilder::set_int(n, "size", size);
             ModelBuilder::set_float(n, "alpha", 0.3f);
             ModelBuilder::set_float(n, "beta", 0.6f);
             ModelBuilder::set_float(n, "bias", 1.5f);
           }});
  check({"MeanVarianceNormalization", {x}, {0}, [](onnx::NodeProto& n) {
           ModelBuilder::set_ints(n, "axes", {1, 3});
         }});
  check({"LayerNormalization",
         {rnd({3, 5, 4}, -2, 2, 58), rnd({5, 4}, 0.5, 1.5, 59)},
         {0, 1},
         [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 1); },
         17});
}

GRADCHECK(SliceAndResize) {
  const Tensor x = rnd({4, 5, 6}, -1, 1, 60);
  check({"Slice",
         {x, Tensor::from<int64_t>({1, -1}, {2}), Tensor::from<int64_t>({4, 0}, {2}),
          Tensor::from<int64_t>({0, 2}, {2}), Tensor::from<int64_t>({2, -2}, {2})},
         {0}});
  check({"Slice",
         {x},
         {0},
         [](onnx::NodeProto& n) {
           ModelBuilder::set_ints(n, "starts", {1});
           ModelBuilder::set_ints(n, "ends", {3});
           ModelBuilder::set_ints(n, "axes", {1});
         },
         9});
  const Tensor img = rnd({1, 2, 3, 4}, -1, 1, 61);
  const Tensor roi = Tensor::empty(DType::Double, {0});
  for (const std::string mode : {"nearest", "linear", "cubic"})
    check({"Resize",
           {img, roi, Tensor::from<float>({1, 1, 2.0f, 1.5f}, {4})},
           {0},
           [=](onnx::NodeProto& n) { ModelBuilder::set_string(n, "mode", mode); }});
  // By sizes, as segmentation heads upsample to the input's size.
  for (const std::string mode : {"nearest", "linear"})
    check({"Resize",
           {img, Tensor::empty(DType::Float, {0}), Tensor::empty(DType::Float, {0}),
            Tensor::from<int64_t>({1, 2, 24, 32}, {4})},
           {0},
           [=](onnx::NodeProto& n) { ModelBuilder::set_string(n, "mode", mode); }});
}

GRADCHECK(Split) {
  // Split has several outputs: check the first through a Concat-free path by giving it one.
  check({"Split",
         {rnd({6, 2}, -1, 1, 62)},
         {0},
         [](onnx::NodeProto& n) { ModelBuilder::set_ints(n, "split", {6}); },
         11});
}

GRADCHECK(MoreUnaryOps) {
  const Tensor x = rnd({2, 3, 5}, -2, 2, 80), unit = rnd({2, 3, 5}, -0.9, 0.9, 81),
               above1 = rnd({2, 3, 5}, 1.2, 3, 82);
  for (const std::string op :
       {"Tan", "Atan", "Sinh", "Cosh", "Asinh", "Softsign", "Selu", "Celu", "HardSigmoid"})
    check({op, {op == "Tan" ? unit : x}, {0}});
  check({"HardSwish", {x}, {0}, {}, 14});
  // Declared zero almost everywhere: the finite differences agree away from the steps.
  for (const std::string op : {"Floor", "Ceil", "Round", "Sign", "Hardmax"}) check({op, {x}, {0}});
  for (const std::string op : {"Asin", "Acos", "Atanh"}) check({op, {unit}, {0}});
  check({"Acosh", {above1}, {0}});
  check({"Celu", {x}, {0}, [](auto& n) { ModelBuilder::set_float(n, "alpha", 0.7f); }, 12});
  check({"Selu", {x}, {0}, [](auto& n) {
           ModelBuilder::set_float(n, "alpha", 1.3f);
           ModelBuilder::set_float(n, "gamma", 0.8f);
         }});
  check({"HardSigmoid", {x}, {0}, [](auto& n) {
           ModelBuilder::set_float(n, "alpha", 0.3f);
           ModelBuilder::set_float(n, "beta", 0.4f);
         }});
  check({"ThresholdedRelu", {x}, {0}, [](auto& n) { ModelBuilder::set_float(n, "alpha", 0.3f); }});
  check({"Shrink", {x}, {0}, [](auto& n) {
           ModelBuilder::set_float(n, "lambd", 0.4f);
           ModelBuilder::set_float(n, "bias", 0.2f);
         }});
}

GRADCHECK(VariadicAndParametricElementwise) {
  // Distinct values (no ties), broadcast in several positions.
  const Tensor a = rnd({3, 1, 4}, -2, 2, 83), b = rnd({5, 4}, -2, 2, 84), c = rnd({4}, -2, 2, 85);
  for (const std::string op : {"Max", "Min", "Mean"}) check({op, {a, b, c}, {0, 1, 2}});
  check({"PRelu", {rnd({2, 3, 4}, -2, 2, 86), rnd({3, 1}, 0.1, 0.5, 87)}, {0, 1}});
  check({"PRelu", {rnd({2, 3, 4}, -2, 2, 88), rnd({1}, 0.1, 0.5, 89)}, {0, 1}});
  check({"Mod", {rnd({2, 3}, 0.5, 4, 90), rnd({3}, 0.7, 1.3, 91)}, {0}, [](auto& n) {
           ModelBuilder::set_int(n, "fmod", 1);
         }});
}

GRADCHECK(MoreReductions) {
  const Tensor x = rnd({3, 4, 5}, -2, 2, 92), pos = rnd({3, 4, 5}, 0.5, 1.5, 93);
  for (int keep : {0, 1})
    for (const std::string op : {"ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
                                 "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSum"}) {
      const Tensor& in = op == "ReduceLogSum" || op == "ReduceProd" ? pos : x;
      check({op, {in}, {0}, [=](auto& n) {
               ModelBuilder::set_ints(n, "axes", {0, 2});
               ModelBuilder::set_int(n, "keepdims", keep);
             }});
    }
  check({"ReduceMax", {x, Tensor::from<int64_t>({1}, {1})}, {0}, {}, 18});  // axes as an input
  check({"ReduceL2", {x}, {0}});                                            // every axis
}

GRADCHECK(MoreDataMovement) {
  const Tensor x = rnd({2, 3, 4}, -1, 1, 94);
  check({"Tile", {x, Tensor::from<int64_t>({2, 1, 3}, {3})}, {0}});
  const Tensor img = rnd({2, 8, 2, 3}, -1, 1, 95);
  for (const std::string mode : {"DCR", "CRD"})
    check({"DepthToSpace", {img}, {0}, [=](auto& n) {
             ModelBuilder::set_int(n, "blocksize", 2);
             ModelBuilder::set_string(n, "mode", mode);
           }});
  check({"SpaceToDepth", {rnd({1, 2, 4, 6}, -1, 1, 96)}, {0}, [](auto& n) {
           ModelBuilder::set_int(n, "blocksize", 2);
         }});
  check({"Pad", {x, Tensor::from<int64_t>({0, 1, -1, 1, 2, 0}, {6}), Tensor::scalar(0.5)}, {0}});
  check({"Pad",
         {x},
         {0},
         [](auto& n) {
           ModelBuilder::set_ints(n, "pads", {1, 0, 2, 0, 1, 1});
         },
         2});
  const Tensor idx = Tensor::from<int64_t>({2, 0, 1, 1, 0, 2, 0, 0}, {2, 1, 4});
  check({"GatherElements", {x, idx}, {0}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); }});
  check({"GatherND", {x, Tensor::from<int64_t>({1, 2, 0, 0, 1, 1}, {3, 2})}, {0}});
  check({"ScatterElements",
         {x, Tensor::from<int64_t>({2, 0, 1, 1}, {1, 1, 4}), rnd({1, 1, 4}, -1, 1, 97)},
         {0, 2},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 1); }});
  check({"ScatterND",
         {x, Tensor::from<int64_t>({1, 2, 0, 0}, {2, 2}), rnd({2, 4}, -1, 1, 98)},
         {0, 2}});
  check({"TopK",
         {x, Tensor::from<int64_t>({2}, {1})},
         {0},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 1); },
         13,
         2});
  check({"Trilu",
         {rnd({2, 4, 5}, -1, 1, 99), Tensor::from<int64_t>({1}, {})},
         {0},
         [](auto& n) { ModelBuilder::set_int(n, "upper", 0); },
         14});
  check({"Compress", {x, Tensor::from<bool>({true, false, true}, {3})}, {0}, [](auto& n) {
           ModelBuilder::set_int(n, "axis", 1);
         }});
  check({"Compress", {x, Tensor::from<bool>({false, true, true, false, true}, {5})}, {0}});
  for (int exclusive : {0, 1})
    for (int reverse : {0, 1})
      check({"CumSum", {x, Tensor::from<int64_t>({1}, {})}, {0}, [=](auto& n) {
               ModelBuilder::set_int(n, "exclusive", exclusive);
               ModelBuilder::set_int(n, "reverse", reverse);
             }});
  check({"CastLike", {x, Tensor::from<double>({0.0}, {1})}, {0}, {}, 15});
}

// RNN, GRU and LSTM: backpropagation through time, to every input that carries a gradient.
// Small sizes (the recurrence is recomputed for each finite difference): hidden 3, input 2,
// sequence 4, batch 2; both directions, both layouts, sequence_lens, initial states.
GRADCHECK(RecurrentCells) {
  const int64_t seq = 4, batch = 2, in = 2, h = 3;
  for (const std::string cell : {"RNN", "GRU", "LSTM"})
    for (const std::string direction : {"forward", "reverse", "bidirectional"})
      for (int64_t layout : {0, 1}) {
        SCOPED_TRACE(cell + " " + direction + " layout " + std::to_string(layout));
        const int64_t D = direction == "bidirectional" ? 2 : 1,
                      G = cell == "RNN" ? 1 : (cell == "GRU" ? 3 : 4);
        const Shape x = layout ? Shape{batch, seq, in} : Shape{seq, batch, in};
        const Shape state = layout ? Shape{batch, D, h} : Shape{D, batch, h};
        std::vector<Tensor> ins{rnd(x, -1, 1, 120),
                                rnd({D, G * h, in}, -0.7, 0.7, 121),
                                rnd({D, G * h, h}, -0.7, 0.7, 122),
                                rnd({D, 2 * G * h}, -0.5, 0.5, 123),
                                Tensor::from<int32_t>({4, 3}, {2}),
                                rnd(state, -0.5, 0.5, 124)};
        std::vector<size_t> wrt{0, 1, 2, 3, 5};
        if (cell == "LSTM") {
          ins.push_back(rnd(state, -0.5, 0.5, 125));
          ins.push_back(rnd({D, 3 * h}, -0.5, 0.5, 126));
          wrt.insert(wrt.end(), {6, 7});
        }
        auto attrs = [=](onnx::NodeProto& n) {
          ModelBuilder::set_int(n, "hidden_size", h);
          ModelBuilder::set_string(n, "direction", direction);
          ModelBuilder::set_int(n, "layout", layout);
        };
        check({cell, ins, wrt, attrs, 14});     // through Y
        check({cell, ins, wrt, attrs, 14, 2});  // Y and Y_h both used? only Y is checked
      }
  // GRU with linear_before_reset, LSTM with clip and input_forget.
  const std::vector<Tensor> gru{rnd({seq, batch, in}, -1, 1, 127), rnd({1, 9, in}, -0.7, 0.7, 128),
                                rnd({1, 9, 3}, -0.7, 0.7, 129), rnd({1, 18}, -0.5, 0.5, 130)};
  check({"GRU",
         gru,
         {0, 1, 2, 3},
         [](onnx::NodeProto& n) {
           ModelBuilder::set_int(n, "hidden_size", 3);
           ModelBuilder::set_int(n, "linear_before_reset", 1);
         },
         14});
  const std::vector<Tensor> lstm{rnd({seq, batch, in}, -1, 1, 131),
                                 rnd({1, 12, in}, -0.7, 0.7, 132), rnd({1, 12, 3}, -0.7, 0.7, 133),
                                 rnd({1, 24}, -0.5, 0.5, 134)};
  check({"LSTM",
         lstm,
         {0, 1, 2, 3},
         [](onnx::NodeProto& n) {
           ModelBuilder::set_int(n, "hidden_size", 3);
           ModelBuilder::set_float(n, "clip", 0.8f);
           ModelBuilder::set_int(n, "input_forget", 1);
         },
         14});
}

// If: the gradient of the branch taken, to the values the branches capture (in1, in2), at any
// depth (the then-branch holds an If of its own).
GRADCHECK(IfBranchesCapturedValues) {
  ModelBuilder inner_then, inner_else, then_b, else_b;
  inner_then.output_any("it", 11).node("Sin", {"in2"}, {"s"}).node("Mul", {"s", "in1"}, {"it"});
  inner_else.output_any("ie", 11).node("Neg", {"in1"}, {"ie"});
  then_b.output_any("t", 11)
      .node("Mul", {"in1", "in2"}, {"m"})
      .node("Tanh", {"m"}, {"th"})
      .node("If", {"in0"}, {"nested"},
            [&](onnx::NodeProto& n) {
              ModelBuilder::set_graph(n, "then_branch", inner_then);
              ModelBuilder::set_graph(n, "else_branch", inner_else);
            })
      .node("Add", {"th", "nested"}, {"t"});
  else_b.output_any("e", 11).node("Add", {"in1", "in2"}, {"a"}).node("Exp", {"a"}, {"e"});
  const AttrFn branches = [&](onnx::NodeProto& n) {
    ModelBuilder::set_graph(n, "then_branch", then_b);
    ModelBuilder::set_graph(n, "else_branch", else_b);
  };
  for (bool flag : {true, false})
    check({"If",
           {Tensor::scalar(flag), rnd({2, 3}, -1, 1, 100), rnd({3}, -1, 1, 101)},
           {1, 2},
           branches});
}

// Loop: backpropagation through the iterations, to the initial carried value and to the values
// the body captures (W, x), through both the final carried value and the scan output; with
// M = 0 too (the gradient passes straight through).
GRADCHECK(LoopThroughIterations) {
  checked_ops().insert("Loop");
  if (recording) return;
  for (int64_t trips : {3, 1, 0}) {
    SCOPED_TRACE("trips " + std::to_string(trips));
    ModelBuilder body;
    body.input("i", 7, {}).input("cond", 9, {}).input("v", 11, {2, 3});
    body.output_any("cond_out", 9).output_any("v_out", 11).output_any("scan", 11);
    body.node("Identity", {"cond"}, {"cond_out"})
        .node("Mul", {"v", "W"}, {"m"})
        .node("Tanh", {"m"}, {"t"})
        .node("Add", {"t", "x"}, {"v_out"})
        .node("Cast", {"i"}, {"i_d"},
              [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "to", 11); })
        .node("Mul", {"v_out", "i_d"}, {"scan"});
    ModelBuilder b(13, 8);
    b.input("M", 7, {}).input("v0", 11, {2, 3}).input("W", 11, {3}).input("x", 11, {2, 3});
    b.output_any("y", 11);
    b.node(
         "Loop", {"M", "", "v0"}, {"v_final", "scans"},
         [&](onnx::NodeProto& n) { ModelBuilder::set_graph(n, "body", body); }, "loop")
        .initializer_i64("axis0", {1}, {0})
        .node("ReduceSum", {"scans", "axis0"}, {"scan_sum"},
              [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "keepdims", 0); })
        .node("Mul", {"v_final", "scan_sum"}, {"y"});
    const NamedValues feeds{{"M", Tensor::scalar(trips)},
                            {"v0", rnd({2, 3}, -1, 1, 160)},
                            {"W", rnd({3}, -1, 1, 161)},
                            {"x", rnd({2, 3}, -1, 1, 162)}};
    if (trips == 0) {  // the scans are empty: the output is the initial value alone
      ModelBuilder b0(13, 8);
      b0.input("M", 7, {}).input("v0", 11, {2, 3}).input("W", 11, {3}).input("x", 11, {2, 3});
      b0.output_any("y", 11).node(
          "Loop", {"M", "", "v0"}, {"y"},
          [&](onnx::NodeProto& n) {
            ModelBuilder body0;
            body0.input("i", 7, {}).input("cond", 9, {}).input("v", 11, {2, 3});
            body0.output_any("cond_out", 9).output_any("v_out", 11);
            body0.node("Identity", {"cond"}, {"cond_out"}).node("Mul", {"v", "W"}, {"v_out"});
            ModelBuilder::set_graph(n, "body", body0);
          },
          "loop");
      check_model(b0.bytes(), feeds, {1, 2});
      continue;
    }
    check_model(b.bytes(), feeds, {1, 2, 3});
  }
}

// Scan: through the states and the stacked outputs, to the initial state, both scan inputs (one
// read along axis 1 in reverse), and a captured weight; one scan output stacked in reverse.
GRADCHECK(ScanThroughIterations) {
  checked_ops().insert("Scan");
  if (recording) return;
  ModelBuilder body;
  body.input("s", 11, {3}).input("x_t", 11, {3}).input("z_t", 11, {3});
  body.output_any("s_out", 11).output_any("y_t", 11);
  body.node("Mul", {"x_t", "W"}, {"a"})
      .node("Add", {"s", "a"}, {"b"})
      .node("Mul", {"b", "z_t"}, {"c"})
      .node("Tanh", {"c"}, {"s_out"})
      .node("Add", {"s_out", "x_t"}, {"y_t"});
  ModelBuilder b(11, 8);
  b.input("s0", 11, {3}).input("xs", 11, {4, 3}).input("zs", 11, {3, 4}).input("W", 11, {3});
  b.output_any("y", 11);
  b.initializer_i64("axis0", {1}, {0});
  b.node(
       "Scan", {"s0", "xs", "zs"}, {"s_final", "ys"},
       [&](onnx::NodeProto& n) {
         ModelBuilder::set_graph(n, "body", body);
         ModelBuilder::set_int(n, "num_scan_inputs", 2);
         ModelBuilder::set_ints(n, "scan_input_axes", {0, 1});
         ModelBuilder::set_ints(n, "scan_input_directions", {0, 1});
         ModelBuilder::set_ints(n, "scan_output_directions", {1});
       },
       "scan")
      .node("ReduceSum", {"ys"}, {"ys_sum"},
            [](onnx::NodeProto& n) {
              ModelBuilder::set_ints(n, "axes", {0});
              ModelBuilder::set_int(n, "keepdims", 0);
            })
      .node("Mul", {"s_final", "ys_sum"}, {"y"});
  const NamedValues feeds{{"s0", rnd({3}, -1, 1, 170)},
                          {"xs", rnd({4, 3}, -1, 1, 171)},
                          {"zs", rnd({3, 4}, -1, 1, 172)},
                          {"W", rnd({3}, -1, 1, 173)}};
  check_model(b.bytes(), feeds, {0, 1, 2, 3});
}

// The float32 backward kernels (oneDNN where it applies) against the float64 reference ones.
std::vector<Tensor> gradients_in(DType dtype, const Case& c, const Tensor& seed64) {
  ModelBuilder b(c.opset, 10);
  std::vector<std::string> names;
  NamedValues feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    names.push_back("in" + std::to_string(i));
    const bool real = c.inputs[i].dtype() == DType::Double;  // index inputs stay as they are
    b.input_any(names.back(), static_cast<int>(real ? dtype : c.inputs[i].dtype()));
    feeds.emplace_back(names.back(), real ? testing::cast_to(c.inputs[i], dtype) : c.inputs[i]);
  }
  b.output_any("y", static_cast<int>(dtype)).node(c.op, names, {"y"}, c.attrs, "op");
  const std::string bytes = b.bytes();
  Graph g = load_model_from_bytes(bytes.data(), bytes.size()).graph;
  ValueInfo seed_info;
  seed_info.name = "seed";
  g.inputs.push_back(seed_info);
  GradientRequest req{"y", "seed", {}};
  for (size_t w : c.wrt) req.wrt.push_back(names[w]);
  const auto grads = append_gradients(g, req, "gradcheck");
  g.outputs.clear();
  for (const auto& n : grads) g.outputs.push_back(ValueInfo{n});
  feeds.emplace_back("seed", testing::cast_to(seed64, dtype));
  std::vector<Tensor> out;
  for (auto& v : run_graph(g, feeds)) {
    Tensor d = Tensor::empty(DType::Double, v.tensor().shape());
    for (int64_t i = 0; i < d.numel(); ++i)
      d.data<double>()[i] =
          dtype == DType::Float ? v.tensor().data<float>()[i] : v.tensor().data<double>()[i];
    out.push_back(d);
  }
  return out;
}

TEST(Gradcheck, Float32ConvolutionBackwardMatchesFloat64) {
  struct Conf {
    Shape x, w;
    std::vector<int64_t> strides, pads, dil;
    int64_t group;
  };
  for (const Conf& k : {Conf{{3, 4, 9, 7}, {6, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
                        Conf{{1, 6, 11, 10}, {9, 2, 3, 2}, {2, 1}, {0, 1, 1, 0}, {2, 1}, 3},
                        Conf{{2, 3, 13}, {5, 3, 4}, {3}, {1, 2}, {1}, 1},
                        // dilated like the last stages of segmentation networks
                        Conf{{1, 16, 13, 13}, {8, 16, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 1},
                        Conf{{1, 32, 17, 17}, {16, 32, 3, 3}, {1, 1}, {4, 4, 4, 4}, {4, 4}, 1},
                        Conf{{1, 64, 9, 9}, {64, 64, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 1}}) {
    Case c{"Conv", {rnd(k.x, -1, 1, 70), rnd(k.w, -1, 1, 71)}, {0, 1}, [&](onnx::NodeProto& n) {
             ModelBuilder::set_ints(n, "strides", k.strides);
             ModelBuilder::set_ints(n, "pads", k.pads);
             ModelBuilder::set_ints(n, "dilations", k.dil);
             ModelBuilder::set_int(n, "group", k.group);
           }};
    // The output shape, for the seed.
    ModelBuilder probe(13, 10);
    probe.input_any("a", 11).input_any("b", 11).output_any("y", 11).node("Conv", {"a", "b"}, {"y"},
                                                                         c.attrs);
    const std::string pb = probe.bytes();
    Session ps = Session::from_bytes(pb.data(), pb.size(), {.threads = testing::test_threads(2)});
    const Shape ys = ps.run({{"a", c.inputs[0]}, {"b", c.inputs[1]}})[0].tensor().shape();
    const Tensor seed = rnd(ys, -1, 1, 72);
    const auto a = gradients_in(DType::Float, c, seed), b = gradients_in(DType::Double, c, seed);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LT(testing::max_rel_diff(a[i], b[i]), 1e-4) << "gradient " << i;
  }
}

// RecurrentGrad's fp32 path (sgemm) against its float64 one (the finite-difference-checked
// loops), at sizes where the products matter: bidirectional, uneven sequence_lens.
TEST(Gradcheck, Float32RecurrentBackwardMatchesFloat64) {
  const int64_t seq = 7, batch = 3, in = 5, h = 6;
  for (const std::string cell : {"RNN", "GRU", "LSTM"})
    for (int64_t lbr : {0, 1}) {
      if (lbr && cell != "GRU") continue;
      SCOPED_TRACE(cell + (lbr ? " linear_before_reset" : ""));
      const int64_t G = cell == "RNN" ? 1 : (cell == "GRU" ? 3 : 4);
      std::vector<Tensor> ins{
          rnd({seq, batch, in}, -1, 1, 140),     rnd({2, G * h, in}, -0.6, 0.6, 141),
          rnd({2, G * h, h}, -0.6, 0.6, 142),    rnd({2, 2 * G * h}, -0.5, 0.5, 143),
          Tensor::from<int32_t>({7, 4, 6}, {3}), rnd({2, batch, h}, -0.5, 0.5, 144)};
      std::vector<size_t> wrt{0, 1, 2, 3, 5};
      if (cell == "LSTM") {
        ins.push_back(rnd({2, batch, h}, -0.5, 0.5, 145));
        ins.push_back(rnd({2, 3 * h}, -0.5, 0.5, 146));
        wrt.insert(wrt.end(), {6, 7});
      }
      const Case c{cell, ins, wrt,
                   [=](onnx::NodeProto& n) {
                     ModelBuilder::set_int(n, "hidden_size", h);
                     ModelBuilder::set_string(n, "direction", "bidirectional");
                     ModelBuilder::set_int(n, "linear_before_reset", lbr);
                   },
                   14};
      const Tensor seed = rnd({seq, 2, batch, h}, -1, 1, 147);
      const auto a = gradients_in(DType::Float, c, seed), b = gradients_in(DType::Double, c, seed);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_LT(testing::max_rel_diff(a[i], b[i]), 1e-4) << "gradient " << i;
    }
}

TEST(Gradcheck, OpsWithoutARuleAreNamed) {
  ModelBuilder b(17, 8);
  b.input_any("x", 11)
      .output_any("y", 11)
      .node("DFT", {"x"}, {"f"}, {}, "floor_it")
      .node("Relu", {"f"}, {"y"});
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  EXPECT_VOLT_ERROR(append_gradients(m.graph, {"y", "", {"x"}}, "model.onnx"), NotImplemented,
                    "floor_it", "DFT", "no gradient rule");
}

// --- every differentiable ONNX op ---------------------------------------------------------------

// Ops of differentiable_ops.txt that volt runs but has no checked rule for yet, each with why.
// An op that gains one must leave this table. (Empty now: LpNormalization and MaxRoiPool have no
// forward kernel, so nothing can be fine-tuned through them.)
const std::map<std::string, std::string> kNotYet = {};

// Inputs the schema calls differentiable that volt's rule leaves alone, each with why.
const std::map<std::pair<std::string, size_t>, std::string> kNotDifferentiated = {
    {{"BatchNormalization", 3}, "the running mean is a statistic each step updates, not trained"},
    {{"BatchNormalization", 4}, "the running variance likewise"},
    {{"Hardmax", 0}, "a one-hot of the argmax: its derivative is zero almost everywhere"},
};

TEST(GradientRules, EveryDifferentiableOnnxOpVoltRunsHasAFiniteDifferenceCheckedRule) {
  recording = true;
  for (auto group : groups()) group();
  recording = false;
  std::ifstream list(std::string(VOLT_SOURCE_DIR) + "/tests/gradcheck/differentiable_ops.txt");
  ASSERT_TRUE(list) << "tests/gradcheck/differentiable_ops.txt";
  int ops = 0, runs = 0, ruled = 0;
  std::vector<std::string> not_run, missing;
  for (std::string line; std::getline(list, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string op, inputs;
    fields >> op >> inputs;
    ++ops;
    if (KernelRegistry::instance().find(kOnnxDomain, op, "cpu").empty()) {
      not_run.push_back(op);  // nothing to fine-tune through
      continue;
    }
    ++runs;
    const GradientRuleEntry* rule = find_gradient_rule(kOnnxDomain, op);
    const bool checked = rule && checked_ops().count(op);
    if (kNotYet.count(op)) {
      EXPECT_FALSE(checked) << op << " has a checked rule now: take it out of kNotYet";
      missing.push_back(op);
      continue;
    }
    ++ruled;
    EXPECT_TRUE(rule) << op << ": no gradient rule (add one, or list it in kNotYet with why)";
    EXPECT_TRUE(checked_ops().count(op)) << op << ": its rule is not checked by finite differences";
    if (!rule) continue;
    std::istringstream each(inputs);
    for (std::string item; std::getline(each, item, ',');) {
      const bool variadic = item.back() == '*';
      const size_t first = std::stoul(item);
      for (size_t i = first; i < (variadic ? first + 4 : first + 1); ++i)
        EXPECT_TRUE(rule->differentiable.input(i) || kNotDifferentiated.count({op, i}))
            << op << ": the schema differentiates input " << i << ", the rule does not";
    }
  }
  EXPECT_GE(ops, 100) << "the list looks truncated";
  std::string skipped;
  for (const auto& op : not_run) skipped += " " + op;
  std::string pending;
  for (const auto& op : missing) pending += " " + op;
  std::printf(
      "%d ONNX ops with a differentiable input; volt runs %d, %d of them with a checked rule.\n"
      "not yet:%s\nnot run by volt:%s\n",
      ops, runs, ruled, pending.c_str(), skipped.c_str());
}

}  // namespace
}  // namespace volt
