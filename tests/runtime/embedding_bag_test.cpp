// The EmbeddingBag Loop torch.onnx writes, fused into one ai.volt EmbeddingBag node
// (runtime/passes/fuse_embedding_bag.cpp): bag for bag what volt's own Loop gives (optimization
// level 1, where the pass does not run), for sums, means and maxima, empty bags, negative
// indices, bounds Slice clamps, and the same error for an index out of range.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "runtime/passes/passes.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::test_options;

constexpr int64_t kRows = 50, kWidth = 8;

// bags = Loop over M of ReduceX(Gather(W, Slice(indices, starts[i], ends[i], [0])), [0]), as
// torch.onnx exports nn.EmbeddingBag (opset 13: ReduceSum's axes an input, the others' an
// attribute); `weighted`: with per_sample_weights, each row times its index's weight. `keepdims`
// other than 0, or `extra`, make a body the pass must leave alone.
std::string bag_model(const std::string& reduce, int64_t keepdims = 0, bool extra = false,
                      bool weighted = false) {
  ModelBuilder b(13);
  std::mt19937 rng(7);
  b.input("indices", 7, {-1}).input("starts", 7, {-1}).input("ends", 7, {-1}).input("M", 7, {});
  if (weighted) b.input("psw", 1, {-1});
  b.output_any("bags", 1);
  b.initializer("W", {kRows, kWidth}, testing::uniform_values(rng, kRows * kWidth));
  b.node("Constant", {}, {"true"}, [](onnx::NodeProto& n) {
    auto* a = n.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
    a->mutable_t()->add_int32_data(1);
  });
  b.node("Loop", {"M", "true"}, {"bags"}, [&](onnx::NodeProto& n) {
    ModelBuilder body(13);
    body.input("i", 7, {}).input("c", 9, {}).output("c_out", 9, {}).output_any("bag", 1);
    body.initializer_i64("zero", {1}, {0});
    body.node("Gather", {"starts", "i"}, {"s"})
        .node("Gather", {"ends", "i"}, {"e"})
        .node("Unsqueeze", {"s", "zero"}, {"s1"})
        .node("Unsqueeze", {"e", "zero"}, {"e1"})
        .node("Slice", {"indices", "s1", "e1", "zero"}, {"row_ids"})
        .node("Gather", {"W", "row_ids"}, {"rows"});
    std::string reduced = "rows";
    if (weighted) {
      body.initializer_i64("one", {1}, {1});
      body.node("Slice", {"psw", "s1", "e1", "zero"}, {"row_weights"})
          .node("Unsqueeze", {"row_weights", "one"}, {"column"})
          .node("Mul", {"rows", "column"}, {"weighted"});
      reduced = "weighted";
    }
    if (extra) {
      body.node("Neg", {"rows"}, {"negated"});
      reduced = "negated";
    }
    body.node(reduce,
              reduce == "ReduceSum" ? std::vector<std::string>{reduced, "zero"}
                                    : std::vector<std::string>{reduced},
              {"bag"}, [&](onnx::NodeProto& r) {
                ModelBuilder::set_int(r, "keepdims", keepdims);
                if (reduce != "ReduceSum") ModelBuilder::set_ints(r, "axes", {0});
              });
    body.node("Cast", {"true"}, {"c_out"},
              [](onnx::NodeProto& c) { ModelBuilder::set_int(c, "to", 9); });
    ModelBuilder::set_graph(n, "body", body);
  });
  return b.bytes();
}

int count_op(const std::string& bytes, const std::string& op) {
  const Graph g = fuse_embedding_bag(load_model_from_bytes(bytes.data(), bytes.size()).graph);
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}

NamedValues bags_feed(std::vector<int64_t> indices, std::vector<int64_t> starts,
                      std::vector<int64_t> ends, int64_t trips, bool weighted = false) {
  const auto n = static_cast<int64_t>(indices.size()), b = static_cast<int64_t>(starts.size());
  NamedValues feed{{"indices", Tensor::from(indices, {n})},
                   {"starts", Tensor::from(starts, {b})},
                   {"ends", Tensor::from(ends, {static_cast<int64_t>(ends.size())})},
                   {"M", Tensor::scalar<int64_t>(trips)}};
  std::vector<float> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    w[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  if (weighted) feed.emplace_back("psw", Tensor::from(w, {n}));
  return feed;
}

// Runs `feed` through the Loop (level 1) and the fused node (level 2): the same bags, up to the
// order of a bag's sums (fp32 rows of values in [-1, 1], a handful per bag).
void expect_fused_as_loop(const std::string& bytes, const NamedValues& feed) {
  Session loop =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 1}));
  Session fused =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 2}));
  const Tensor a = loop.run(feed)[0].tensor(), b = fused.run(feed)[0].tensor();
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::isnan(x) || std::isinf(x)) {
      EXPECT_TRUE(std::isnan(x) ? std::isnan(y) : x == y)
          << "element " << i << ": " << x << " " << y;
      continue;
    }
    EXPECT_NEAR(x, y, 1e-6f * std::max(1.0f, std::abs(x))) << "element " << i;
  }
}

TEST(EmbeddingBag, TheExportedLoopBecomesOneNode) {
  for (const char* reduce : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    EXPECT_EQ(count_op(bag_model(reduce), "EmbeddingBag"), 1) << reduce;
    EXPECT_EQ(count_op(bag_model(reduce), "Loop"), 0) << reduce;
    EXPECT_EQ(count_op(bag_model(reduce, 0, false, true), "EmbeddingBag"), 1) << reduce;
  }
  // Bodies that compute something else keep their Loop.
  EXPECT_EQ(count_op(bag_model("ReduceSum", 1), "Loop"), 1);
  EXPECT_EQ(count_op(bag_model("ReduceSum", 0, true), "Loop"), 1);
  EXPECT_EQ(count_op(bag_model("ReduceProd"), "Loop"), 1);
}

TEST(EmbeddingBag, BagsAreWhatTheLoopGives) {
  // Bags of 2, 1, 0 (empty), 3 rows, a negative index, then bounds Slice clamps: an end past
  // the indices, a negative start (counted from the end), an end before the start.
  const std::vector<int64_t> indices = {3, 7, 49, -1, 0, 12, 12, 5, 30};
  const std::vector<int64_t> starts = {0, 2, 3, 3, 6, 7, -3, 5};
  const std::vector<int64_t> ends = {2, 3, 3, 6, 7, 20, 9, 2};
  for (const char* reduce : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    SCOPED_TRACE(reduce);
    const std::string bytes = bag_model(reduce);
    expect_fused_as_loop(bytes, bags_feed(indices, starts, ends, 8));
    expect_fused_as_loop(bytes, bags_feed(indices, starts, ends, 3));  // fewer trips than bags
    expect_fused_as_loop(bag_model(reduce, 0, false, true),
                         bags_feed(indices, starts, ends, 8, true));
  }
}

TEST(EmbeddingBag, ABagOfManyRowsInParallel) {
  // 64 bags of 40 indices each: enough work for the threads.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int64_t> row(-kRows, kRows - 1);
  std::vector<int64_t> indices(64 * 40), starts, ends;
  for (auto& i : indices) i = row(rng);
  for (int64_t b = 0; b < 64; ++b) {
    starts.push_back(b * 40);
    ends.push_back(b * 40 + 40 - b % 3);
  }
  for (const char* reduce : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    SCOPED_TRACE(reduce);
    expect_fused_as_loop(bag_model(reduce), bags_feed(indices, starts, ends, 64));
  }
}

TEST(EmbeddingBag, AnIndexOutOfRangeIsAnErrorAndTheSessionGoesOn) {
  const std::string bytes = bag_model("ReduceSum");
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 2}));
  EXPECT_VOLT_ERROR(s.run(bags_feed({1, 50}, {0}, {2}, 1)), InvalidArgument,
                    "index 50 is out of range");
  EXPECT_VOLT_ERROR(s.run(bags_feed({1, 2}, {0}, {2}, 2)), InvalidArgument,
                    "bag 1 of 2 has no bound");
  const Tensor ok = s.run(bags_feed({1, 2}, {0}, {2}, 1))[0].tensor();
  EXPECT_EQ(ok.shape(), (Shape{1, kWidth}));
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// An ai.volt EmbeddingBag node written into a model directly (the domain is open to models): bad
// operands are errors that name the node, never a crash or a wild allocation.
std::string direct_bag_model(const std::string& mode, int weight_type, int64_t extra_inputs = 0) {
  ModelBuilder b(13);
  auto* volt_opset = b.proto().add_opset_import();
  volt_opset->set_domain("ai.volt");
  volt_opset->set_version(1);
  b.input("W", weight_type, {kRows, kWidth}).input("indices", 7, {-1}).input_any("starts", 7);
  b.input("ends", 7, {-1}).input("M", 7, {}).output_any("bags", 1);
  std::vector<std::string> ins = {"W", "indices", "starts", "ends", "M"};
  for (int64_t i = 0; i < extra_inputs; ++i) ins.push_back("indices");
  b.node("EmbeddingBag", ins, {"bags"}, [&](onnx::NodeProto& n) {
    n.set_domain("ai.volt");
    ModelBuilder::set_string(n, "mode", mode);
  });
  return b.bytes();
}

TEST(EmbeddingBag, BadOperandsOfADirectNodeAreErrors) {
  const Tensor w = Tensor::from(std::vector<float>(kRows * kWidth, 1.0f), {kRows, kWidth});
  const NamedValues feed = {{"W", w},
                            {"indices", Tensor::from<int64_t>({1, 2, 3}, {3})},
                            {"starts", Tensor::from<int64_t>({0, 1}, {1, 2})},
                            {"ends", Tensor::from<int64_t>({3}, {1})},
                            {"M", Tensor::scalar<int64_t>(1)}};
  auto run = [&](const std::string& bytes, const NamedValues& f) {
    Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options({}));
    return s.run(f);
  };
  EXPECT_VOLT_ERROR(run(direct_bag_model("median", 1), feed), InvalidModel, "mode must be");
  EXPECT_VOLT_ERROR(run(direct_bag_model("sum", 1, 2), feed), InvalidModel, "takes weight");
  EXPECT_VOLT_ERROR(run(direct_bag_model("sum", 1), feed), InvalidArgument, "starts and ends");
  NamedValues flat = feed;
  flat[2].second = Tensor::from<int64_t>({0}, {1});
  EXPECT_EQ(run(direct_bag_model("sum", 1), flat)[0].tensor().shape(), (Shape{1, kWidth}));
  NamedValues wrong_weights = flat;
  wrong_weights[0].second = Tensor::from(std::vector<int64_t>(kRows * kWidth, 1), {kRows, kWidth});
  EXPECT_VOLT_ERROR(run(direct_bag_model("sum", 7), wrong_weights), InvalidArgument,
                    "weight must be a float");
  // 2^62 bags of 8 floats: refused before the trip count sizes anything (UBSan watches the
  // arithmetic).
  NamedValues huge = flat;
  huge[4].second = Tensor::scalar<int64_t>(int64_t{1} << 62);
  try {
    run(direct_bag_model("sum", 1), huge);
    ADD_FAILURE() << "2^62 bags ran";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::OutOfMemory || e.code() == ErrorCode::InvalidArgument)
        << e.what();
  }
}

}  // namespace
}  // namespace volt
