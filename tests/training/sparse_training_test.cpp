// Row-sparse gradients for embedding tables and the lazy optimizer updates: against the dense
// gradient and the dense update where the mathematics says they agree, apart where it says
// they differ.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

namespace fs = std::filesystem;
using testing::ModelBuilder;

constexpr int64_t kRows = 50, kDim = 4;

// logits = Flatten(Gather(E, ids)) · W + Flatten(Gather(E, more)) · W2: one table read twice.
std::string embedding_model() {
  static const std::string path = [] {
    ModelBuilder b;
    b.input("ids", 7, {-1, 3}).input("more", 7, {-1, 1}).output("logits", 1, {-1, 2});
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> e(kRows * kDim), w(12 * 2), w2(4 * 2);
    for (float& x : e) x = u(rng);
    for (float& x : w) x = u(rng);
    for (float& x : w2) x = u(rng);
    b.initializer("E", {kRows, kDim}, e).initializer("W", {12, 2}, w).initializer("W2", {4, 2}, w2);
    b.node("Gather", {"E", "ids"}, {"rows"})
        .node("Flatten", {"rows"}, {"flat"})
        .node("MatMul", {"flat", "W"}, {"a"})
        .node("Gather", {"E", "more"}, {"rows2"})
        .node("Flatten", {"rows2"}, {"flat2"})
        .node("MatMul", {"flat2", "W2"}, {"b"})
        .node("Add", {"a", "b"}, {"logits"});
    const std::string p =
        (fs::temp_directory_path() / ("volt_sparse_train_" + std::to_string(getpid()) + ".onnx"))
            .string();
    b.save(p);
    return p;
  }();
  return path;
}

// A batch whose ids repeat (duplicates must add up) and include a negative one (from the end).
NamedValues batch(int64_t first_id) {
  Tensor ids =
      Tensor::from<int64_t>({first_id, first_id + 1, first_id, 7, -1, first_id + 2}, {2, 3});
  Tensor more = Tensor::from<int64_t>({first_id + 1, 9}, {2, 1});
  return {{"ids", ids}, {"more", more}, {"label", Tensor::from<int64_t>({0, 1}, {2})}};
}

Trainer make(TrainOptions o) {
  o.emplace_back("threads", "1");
  return Trainer(embedding_model(), o);
}

double max_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

TEST(RowSparse, SgdStepEqualsTheDenseStep) {
  // Plain SGD: the lazy update of the touched rows is exactly the dense update, and with the
  // learning rate 1 the change of E is minus the gradient: row-sparse equals dense, restricted
  // to the touched rows, and untouched rows do not move.
  Trainer sparse = make({{"optimizer", "sgd"}, {"learning_rate", "1"}});
  Trainer dense = make({{"optimizer", "sgd"}, {"learning_rate", "1"}, {"sparse_gradients", "off"}});
  const Tensor before = sparse.weight("E").clone();
  EXPECT_FLOAT_EQ(sparse.step(batch(2)), dense.step(batch(2)));
  EXPECT_LT(max_diff(sparse.weight("E"), dense.weight("E")), 1e-6);
  EXPECT_LT(max_diff(sparse.weight("W"), dense.weight("W")), 1e-6);
  const std::set<int64_t> touched = {2, 3, 4, 7, kRows - 1, 9};
  for (int64_t r = 0; r < kRows; ++r) {
    double change = 0;
    for (int64_t j = 0; j < kDim; ++j)
      change += std::fabs(sparse.weight("E").data<float>()[r * kDim + j] -
                          before.data<float>()[r * kDim + j]);
    EXPECT_EQ(change > 0, touched.count(r) > 0) << "row " << r;
  }
}

TEST(RowSparse, LazyAdamLeavesRowsAloneUntilTouchedDenseAdamDoesNot) {
  Trainer lazy = make({{"optimizer", "adam"}, {"learning_rate", "0.01"}});
  Trainer dense = make({{"optimizer", "adam"}, {"learning_rate", "0.01"}, {"lazy_update", "off"}});
  Trainer reference =
      make({{"optimizer", "adam"}, {"learning_rate", "0.01"}, {"sparse_gradients", "off"}});
  for (Trainer* t : {&lazy, &dense, &reference}) t->step(batch(2));
  // After one step all three agree (Adam's moments start at zero everywhere).
  EXPECT_LT(max_diff(lazy.weight("E"), reference.weight("E")), 1e-6);
  const Tensor after_first = lazy.weight("E").clone();
  for (Trainer* t : {&lazy, &dense, &reference}) t->step(batch(20));  // rows 2-4 not touched
  // Dense semantics (whether the gradient arrived sparse or not) keep moving rows 2-4 on their
  // momentum; the lazy update leaves them until they are touched again.
  EXPECT_LT(max_diff(dense.weight("E"), reference.weight("E")), 1e-6);
  for (int64_t r : {2, 3, 4}) {
    for (int64_t j = 0; j < kDim; ++j) {
      const int64_t i = r * kDim + j;
      EXPECT_EQ(lazy.weight("E").data<float>()[i], after_first.data<float>()[i]);
      EXPECT_NE(dense.weight("E").data<float>()[i], after_first.data<float>()[i]);
    }
  }
  // Rows touched in both steps agree between lazy and dense (same moments history).
  for (int64_t j = 0; j < kDim; ++j)
    EXPECT_NEAR(lazy.weight("E").data<float>()[7 * kDim + j],
                dense.weight("E").data<float>()[7 * kDim + j], 1e-6);
}

TEST(RowSparse, EveryOptimizerTrainsAndCheckpointsResumeExactly) {
  const fs::path dir = fs::temp_directory_path() / ("volt_rs_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* opt : {"sgd", "adam", "adamw", "adagrad"}) {
    SCOPED_TRACE(opt);
    TrainOptions o = {{"optimizer", opt},
                      {"learning_rate", "0.05"},
                      {"momentum", "0.9"},
                      {"weight_decay", "0.01"},
                      {"max_grad_norm", "5"}};
    if (std::string(opt) != "sgd") o.erase(o.begin() + 2);
    Trainer a = make(o);
    float first = a.step(batch(1)), last = 0;
    for (int i = 0; i < 30; ++i) last = a.step(batch(1 + i % 3));
    EXPECT_LT(last, first);
    // Save, run on, then resume a fresh trainer from the checkpoint: bitwise the same.
    const std::string ckpt = (dir / (std::string(opt) + ".ckpt")).string();
    a.save_checkpoint(ckpt);
    a.step(batch(5));
    Trainer b = make(o);
    b.load_checkpoint(ckpt);
    b.step(batch(5));
    EXPECT_EQ(max_diff(a.weight("E"), b.weight("E")), 0.0);
    // Export: the tuned table is in the plain model.
    const std::string out = (dir / (std::string(opt) + ".onnx")).string();
    a.export_model(out);
    Session s(out);
    const auto got = s.run({batch(3)[0], batch(3)[1]});
    const auto want = a.predict({batch(3)[0], batch(3)[1]});
    EXPECT_EQ(max_diff(got[0].tensor(), want[0].tensor()), 0.0);
  }
  fs::remove_all(dir);
}

TEST(RowSparse, BigTableIdsSortAcrossSeveralRadixPasses) {
  // 300,000 rows: the touched rows are sorted 11 bits at a time, in two passes; ids that differ
  // only in their high bits, or only in their low ones, must still come out in order and summed.
  constexpr int64_t kBig = 300000;
  ModelBuilder b;
  b.input("ids", 7, {-1, 4}).output("logits", 1, {-1, 2});
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> e(kBig * 2), w(8 * 2);
  for (float& x : e) x = u(rng);
  for (float& x : w) x = u(rng);
  b.initializer("E", {kBig, 2}, e).initializer("W", {8, 2}, w);
  b.node("Gather", {"E", "ids"}, {"rows"})
      .node("Flatten", {"rows"}, {"flat"})
      .node("MatMul", {"flat", "W"}, {"logits"});
  const std::string path =
      (fs::temp_directory_path() / ("volt_sparse_big_" + std::to_string(getpid()) + ".onnx"))
          .string();
  b.save(path);
  const NamedValues batch = {{"ids", Tensor::from<int64_t>({kBig - 1, 2048, 1, 2048 + 1, 4096, 1,
                                                            kBig - 2049, -5, 2048, 77777, 0, 4097},
                                                           {3, 4})},
                             {"label", Tensor::from<int64_t>({0, 1, 1}, {3})}};
  TrainOptions o = {{"optimizer", "sgd"}, {"learning_rate", "1"}, {"threads", "1"}};
  Trainer sparse(path, o);
  o.emplace_back("sparse_gradients", "off");
  Trainer dense(path, o);
  EXPECT_FLOAT_EQ(sparse.step(batch), dense.step(batch));
  EXPECT_LT(max_diff(sparse.weight("E"), dense.weight("E")), 1e-6);
  fs::remove(path);
}

// logits = Gemm(x, W1, b, alpha 0.5) + MatMul(x2, W2): x and x2 fed as CSR matrices.
std::string csr_model() {
  static const std::string path = [] {
    ModelBuilder b;
    b.input("x", 1, {-1, 6}).input("x2", 1, {-1, 5}).output("logits", 1, {-1, 3});
    std::mt19937 rng(8);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> w1(6 * 3), w2(5 * 3), bias(3);
    for (float& v : w1) v = u(rng);
    for (float& v : w2) v = u(rng);
    for (float& v : bias) v = u(rng);
    b.initializer("W1", {6, 3}, w1).initializer("W2", {5, 3}, w2).initializer("B", {3}, bias);
    b.node("Gemm", {"x", "W1", "B"}, {"a"},
           [](onnx::NodeProto& n) {
             auto* a = n.add_attribute();
             a->set_name("alpha");
             a->set_type(onnx::AttributeProto::FLOAT);
             a->set_f(0.5f);
           })
        .node("MatMul", {"x2", "W2"}, {"c"})
        .node("Add", {"a", "c"}, {"logits"});
    const std::string p =
        (fs::temp_directory_path() / ("volt_csr_train_" + std::to_string(getpid()) + ".onnx"))
            .string();
    b.save(p);
    return p;
  }();
  return path;
}

// Rows of x use columns 0, 2, 3 (column 3 twice) and none of 1, 4, 5; x2 columns 1 and 4.
NamedValues csr_batch(bool sparse) {
  const Tensor x = Tensor::from<float>({1, 0, 2, 0, 0, 0, 0, 0, -1, 3, 0, 0}, {2, 6});
  const Tensor x2 = Tensor::from<float>({0, 0.5f, 0, 0, 0, 0, 2, 0, 0, 1}, {2, 5});
  NamedValues b = {{"x", x}, {"x2", x2}, {"label", Tensor::from<int64_t>({2, 0}, {2})}};
  if (sparse) {
    b[0].second = CsrTensor::from_dense(x);
    b[1].second = CsrTensor::from_dense(x2);
  }
  return b;
}

TEST(RowSparse, WeightsBehindCsrInputsGetRowSparseGradients) {
  // Plain SGD: the lazy update equals the dense one, so CSR-fed training must give the weights
  // that dense-fed training with dense gradients gives; the rows of W1 and W2 whose input
  // columns are empty in the batch must not move.
  TrainOptions o = {{"optimizer", "sgd"}, {"learning_rate", "1"}, {"threads", "1"}};
  Trainer sparse(csr_model(), o);
  o.emplace_back("sparse_gradients", "off");
  Trainer dense(csr_model(), o);
  const Tensor w1 = sparse.weight("W1").clone(), w2 = sparse.weight("W2").clone();
  EXPECT_FLOAT_EQ(sparse.step(csr_batch(true)), dense.step(csr_batch(false)));
  for (const char* w : {"W1", "W2", "B"})
    EXPECT_LT(max_diff(sparse.weight(w), dense.weight(w)), 1e-6) << w;
  auto row_moved = [](const Tensor& now, const Tensor& before, int64_t r) {
    for (int64_t j = 0; j < 3; ++j)
      if (now.data<float>()[r * 3 + j] != before.data<float>()[r * 3 + j]) return true;
    return false;
  };
  for (int64_t r = 0; r < 6; ++r)
    EXPECT_EQ(row_moved(sparse.weight("W1"), w1, r), r == 0 || r == 2 || r == 3) << "W1 row " << r;
  for (int64_t r = 0; r < 5; ++r)
    EXPECT_EQ(row_moved(sparse.weight("W2"), w2, r), r == 1 || r == 4) << "W2 row " << r;
  // With weight decay the dense update moves every row and the lazy one only the touched rows:
  // that the CSR-fed step leaves rows 1, 4, 5 of W1 alone shows its gradient was row-sparse.
  TrainOptions decay = {
      {"optimizer", "sgd"}, {"learning_rate", "0.1"}, {"weight_decay", "0.5"}, {"threads", "1"}};
  Trainer lazy(csr_model(), decay), all_rows(csr_model(), decay);
  lazy.step(csr_batch(true));
  all_rows.step(csr_batch(false));
  for (int64_t r = 0; r < 6; ++r) {
    EXPECT_EQ(row_moved(lazy.weight("W1"), w1, r), r == 0 || r == 2 || r == 3) << "W1 row " << r;
    EXPECT_TRUE(row_moved(all_rows.weight("W1"), w1, r)) << "W1 row " << r;
  }
  // The same trainer still takes dense batches (the dense-gradient graph), and evaluates CSR.
  EXPECT_NO_THROW(sparse.step(csr_batch(false)));
  EXPECT_NEAR(sparse.evaluate(csr_batch(true)), sparse.evaluate(csr_batch(false)), 1e-6);
}

TEST(RowSparse, BadIdsFailTheStepAndChangeNothing) {
  Trainer t = make({{"optimizer", "adam"}});
  const Tensor before = t.weight("E").clone();
  NamedValues b = batch(2);
  b[0].second = Tensor::from<int64_t>({1, 2, 3, 4, 5, kRows}, {2, 3});
  EXPECT_THROW(t.step(b), Error);
  EXPECT_EQ(max_diff(t.weight("E"), before), 0.0);
  EXPECT_EQ(t.steps(), 0);
}

}  // namespace
}  // namespace volt
