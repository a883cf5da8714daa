// Data-parallel training, run as two ranks by mpirun (tests/CMakeLists.txt):
//   distributed_test              the GoogleTest cases below, on every rank
//   distributed_test kill DIR     rank 1 kills itself at step 5 while rank 0 checkpoints each step
//   distributed_test leave DIR    rank 1 frees its trainer and returns at step 5
//   distributed_test write DIR    (one process) writes the model DIR/mlp.onnx for those
//   distributed_test load DIR     (one process) the checkpoint DIR/ckpt loads
// kill_and_leave_test.sh runs the last three and checks that the job ends within 60 s.
//
// The cases compare two ranks, each fed half of every global batch, with one process that
// accumulates the same halves in rank order (bit for bit: two ranks add the same two numbers
// the accumulation adds) and with one process fed the whole batch (to 1e-5).
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

#include "model_builder.hpp"
#include "runtime/training/communicator.hpp"
#include "runtime/training/gradient_exchange.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

namespace fs = std::filesystem;
using testing::ModelBuilder;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::vector<float> random_values(size_t n, unsigned seed, float scale = 0.5f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A folder shared by the ranks (one machine): rank 0 makes it and tells the others.
std::string shared_path(const std::string& name) {
  static const std::string dir = [] {
    char buf[256] = {};
    if (world_rank() == 0) {
      std::string t = (fs::temp_directory_path() / "volt_dist_XXXXXX").string();
      std::strncpy(buf, t.c_str(), sizeof buf - 1);
      if (!mkdtemp(buf)) buf[0] = 0;
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    return std::string(buf);
  }();
  return (fs::path(dir) / name).string();
}

// x[B,16] -> Gemm 32 -> Relu -> Gemm 4.
ModelBuilder mlp_builder(unsigned seed) {
  ModelBuilder b;
  b.input("x", 1, {-1, 16}).output("logits", 1, {-1, 4});
  b.initializer("W1", {16, 32}, random_values(16 * 32, seed))
      .initializer("b1", {32}, random_values(32, seed + 1))
      .initializer("W2", {32, 4}, random_values(32 * 4, seed + 2))
      .initializer("b2", {4}, random_values(4, seed + 3));
  b.node("Gemm", {"x", "W1", "b1"}, {"h"})
      .node("Relu", {"h"}, {"r"})
      .node("Gemm", {"r", "W2", "b2"}, {"logits"});
  return b;
}

std::string mlp_model(const std::string& name, unsigned seed = 1) {
  const std::string path = shared_path(name);
  if (world_rank() == 0) mlp_builder(seed).save(path);
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

// Two embedding tables read by Gather (row-sparse gradients) and dense features:
// logits = Concat(Flatten(E0[ids0]), Flatten(E1[ids1]), x) · W.
constexpr int64_t kRows0 = 1000, kRows1 = 400, kDim = 8;
std::string dlrm_model() {
  const std::string path = shared_path("dlrm.onnx");
  ModelBuilder b;
  b.input("ids0", 7, {-1, 3}).input("ids1", 7, {-1, 2}).input("x", 1, {-1, 4});
  b.output("logits", 1, {-1, 2});
  b.initializer("E0", {kRows0, kDim}, random_values(kRows0 * kDim, 11))
      .initializer("E1", {kRows1, kDim}, random_values(kRows1 * kDim, 12))
      .initializer("W", {5 * kDim + 4, 2}, random_values((5 * kDim + 4) * 2, 13));
  b.node("Gather", {"E0", "ids0"}, {"g0"})
      .node("Flatten", {"g0"}, {"f0"})
      .node("Gather", {"E1", "ids1"}, {"g1"})
      .node("Flatten", {"g1"}, {"f1"})
      .node("Concat", {"f0", "f1", "x"}, {"c"},
            [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 1); })
      .node("MatMul", {"c", "W"}, {"logits"});
  if (world_rank() == 0) b.save(path);
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

Tensor rows_of(const Tensor& t, int64_t begin, int64_t end) {
  Shape s = t.shape();
  s[0] = end - begin;
  const size_t row = t.nbytes() / static_cast<size_t>(t.dim(0));
  return Tensor::copy_of(t.dtype(), s,
                         static_cast<const char*>(t.raw()) + static_cast<size_t>(begin) * row);
}

NamedValues half(const NamedValues& batch, int which) {
  NamedValues out;
  for (const auto& [name, v] : batch) {
    const int64_t n = v.tensor().dim(0);
    out.emplace_back(name, rows_of(v.tensor(), which * n / 2, (which + 1) * n / 2));
  }
  return out;
}

// Global batch `step` (the same on every rank): 16 samples.
NamedValues mlp_batch(int step) {
  std::mt19937 rng(100 + step);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(16 * 16);
  for (float& v : x) v = u(rng);
  std::vector<int64_t> y(16);
  for (auto& v : y) v = static_cast<int64_t>(rng() % 4);
  return {{"x", Tensor::from(x, {16, 16})}, {"label", Tensor::from(y, {16})}};
}

NamedValues dlrm_batch(int step) {
  std::mt19937 rng(200 + step);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<int64_t> ids0(16 * 3), ids1(16 * 2), y(16);
  // Skewed ids, so that the ranks' rows overlap and each rank's rows repeat.
  for (auto& v : ids0) v = static_cast<int64_t>((rng() % 60) * (rng() % 16));
  for (auto& v : ids1) v = static_cast<int64_t>(rng() % 50);
  std::vector<float> x(16 * 4);
  for (float& v : x) v = u(rng);
  for (auto& v : y) v = static_cast<int64_t>(rng() % 2);
  return {{"ids0", Tensor::from(ids0, {16, 3})},
          {"ids1", Tensor::from(ids1, {16, 2})},
          {"x", Tensor::from(x, {16, 4})},
          {"label", Tensor::from(y, {16})}};
}

uint64_t checksum(const Trainer& t, const std::vector<std::string>& names) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& n : names) {
    const Tensor& w = t.weight(n);
    const auto* p = static_cast<const unsigned char*>(w.raw());
    for (size_t i = 0; i < w.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

TrainOptions with(TrainOptions o, std::initializer_list<std::pair<std::string, std::string>> more) {
  o.emplace_back("threads", "1");
  for (const auto& kv : more) o.push_back(kv);
  return o;
}

// 20 steps three ways; weights compared bitwise with the accumulation, to 1e-5 with the whole
// batch, and by checksum across ranks.
void check_equivalence(const std::string& model, const TrainOptions& options,
                       NamedValues (*batch)(int), const std::vector<std::string>& weights,
                       double whole_tolerance) {
  Trainer dist(model, with(options, {{"distributed", "mpi"}}));
  Trainer accumulated(model, with(options, {{"distributed", "off"}, {"accumulate_steps", "2"}}));
  Trainer whole(model, with(options, {{"distributed", "off"}}));
  ASSERT_EQ(dist.world_size(), 2);
  ASSERT_EQ(dist.rank(), world_rank());
  EXPECT_EQ(accumulated.world_size(), 1);
  for (int s = 0; s < 20; ++s) {
    const NamedValues b = batch(s);
    const float loss = dist.step(half(b, dist.rank()));
    const float l0 = accumulated.step(half(b, 0)), l1 = accumulated.step(half(b, 1));
    whole.step(b);
    EXPECT_NEAR(loss, (static_cast<double>(l0) + l1) / 2, 1e-6) << "step " << s;
  }
  EXPECT_EQ(dist.steps(), 20);
  EXPECT_EQ(accumulated.steps(), 20);
  for (const auto& name : weights) {
    const Tensor& d = dist.weight(name);
    const Tensor& a = accumulated.weight(name);
    const Tensor& w = whole.weight(name);
    ASSERT_EQ(d.nbytes(), a.nbytes());
    EXPECT_EQ(std::memcmp(d.raw(), a.raw(), d.nbytes()), 0)
        << name << ": two ranks differ from one process accumulating the same halves";
    double worst = 0;
    for (int64_t i = 0; i < d.numel(); ++i) {
      const double x = d.data<float>()[i], y = w.data<float>()[i];
      worst = std::max(worst, std::abs(x - y) / std::max(1e-3, std::abs(y)));
    }
    EXPECT_LE(worst, whole_tolerance) << name << ": against one process on the whole batch";
  }
  // Every rank holds the same weights.
  uint64_t sum[2] = {checksum(dist, weights), 0};
  sum[1] = ~sum[0];
  MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(sum[0], ~sum[1]) << "the ranks' weights differ";
}

// Buckets small enough that the first ones are summed by non-blocking all-reduces while the
// "backward pass" adds the rest, and the last (and the fp64 one) by completing ones: with the
// ranks committed (blocking) and not, on a communicator that may block and on one opened beside
// another (which must not), every sum is the two ranks' values added, bit for bit.
TEST(Distributed, GradientBucketsSumInEveryMode) {
  auto first = open_communicator("mpi");
  auto second = open_communicator("mpi");  // opened while `first` is: it polls even committed
  // Buckets of 1024 floats: {700}, {3000}, fp64 {33}, {260}, {2100}, {9} (summed in finish()).
  const std::vector<DenseGradientBuckets::Slot> slots = {
      {DType::Float, {700}}, {DType::Float, {3000}}, {DType::Double, {33}},
      {DType::Float, {260}}, {DType::Float, {2100}}, {DType::Float, {9}}};
  for (Communicator* comm : {first.get(), second.get()})
    for (bool committed : {true, false})
      for (int step = 0; step < 2; ++step) {
        DenseGradientBuckets buckets(slots, 4096);
        std::optional<Communicator::Committed> scope;
        if (committed) scope.emplace(*comm);
        buckets.begin(true, comm);
        std::vector<Tensor> mine, theirs;
        for (size_t i = 0; i < slots.size(); ++i) {
          const size_t n = static_cast<size_t>(slots[i].shape[0]);
          const unsigned seed = static_cast<unsigned>(100 * step + 10 * i);
          auto values = [&](int rank) {
            const std::vector<float> v = random_values(n, seed + static_cast<unsigned>(rank));
            if (slots[i].dtype == DType::Float) return Tensor::from<float>(v, {slots[i].shape[0]});
            return Tensor::from<double>(std::vector<double>(v.begin(), v.end()),
                                        {slots[i].shape[0]});
          };
          mine.push_back(values(comm->rank()));
          theirs.push_back(values(1 - comm->rank()));
          buckets.add(i, mine.back());
        }
        buckets.finish();
        for (size_t i = 0; i < slots.size(); ++i) {
          const Tensor sum = buckets.gradient(i, 1.0);
          for (int64_t e = 0; e < sum.numel(); ++e) {
            const double a = slots[i].dtype == DType::Float ? mine[i].data<float>()[e]
                                                            : mine[i].data<double>()[e];
            const double b = slots[i].dtype == DType::Float ? theirs[i].data<float>()[e]
                                                            : theirs[i].data<double>()[e];
            const double got =
                slots[i].dtype == DType::Float ? sum.data<float>()[e] : sum.data<double>()[e];
            const double want =
                slots[i].dtype == DType::Float
                    ? static_cast<double>(static_cast<float>(a) + static_cast<float>(b))
                    : a + b;
            ASSERT_EQ(got, want) << "slot " << i << " element " << e
                                 << (committed ? " committed" : "");
          }
        }
      }
}

TEST(Distributed, MlpWithMomentumMatchesAccumulation) {
  check_equivalence(mlp_model("mlp.onnx"),
                    {{"optimizer", "sgd"}, {"learning_rate", "0.05"}, {"momentum", "0.9"}},
                    mlp_batch, {"W1", "b1", "W2", "b2"}, 1e-5);
}

TEST(Distributed, RowSparseLazyAdamMatchesAccumulation) {
  check_equivalence(dlrm_model(), {{"optimizer", "adam"}, {"learning_rate", "0.01"}}, dlrm_batch,
                    {"E0", "E1", "W"}, 1e-5);
}

TEST(Distributed, DenseExchangeOfTablesPastTheThreshold) {
  // Threshold 0: every table goes as a dense all-reduce; the same sums, so the same weights.
  check_equivalence(
      dlrm_model(),
      {{"optimizer", "adam"}, {"learning_rate", "0.01"}, {"sparse_allreduce_threshold", "0"}},
      dlrm_batch, {"E0", "E1", "W"}, 1e-5);
}

TEST(Distributed, SparseExchangeSendsLessThanDense) {
  const std::string model = dlrm_model();
  Trainer sparse(model, with({{"optimizer", "adam"}}, {}));
  Trainer dense(model, with({{"optimizer", "adam"}, {"sparse_allreduce_threshold", "0"}}, {}));
  sparse.step(half(dlrm_batch(0), sparse.rank()));
  dense.step(half(dlrm_batch(0), dense.rank()));
  const int64_t table_bytes = (kRows0 + kRows1) * kDim * 4;
  EXPECT_GE(dense.exchanged_bytes(), table_bytes);
  EXPECT_LT(sparse.exchanged_bytes(), table_bytes / 4);
  EXPECT_GT(sparse.exchanged_bytes(), 0);
}

TEST(Distributed, UnequalShardsFailOnEveryRank) {
  Trainer t(mlp_model("mlp.onnx"), with({}, {}));
  const NamedValues b = mlp_batch(0);
  const NamedValues mine = t.rank() == 0
                               ? half(b, 0)
                               : NamedValues{{"x", rows_of(b[0].second.tensor(), 8, 15)},
                                             {"label", rows_of(b[1].second.tensor(), 8, 15)}};
  try {
    t.step(mine);
    FAIL() << "unequal shards were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("same number"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.steps(), 0);
}

TEST(Distributed, BadInputOnOneRankFailsEveryRankAndNothingMoves) {
  Trainer t(mlp_model("mlp.onnx"), with({}, {}));
  const NamedValues b = mlp_batch(0);
  NamedValues mine = half(b, t.rank());
  if (t.rank() == 1)
    mine[0].second = Tensor::from(std::vector<float>(8 * 5, 0.f), {8, 5});  // 5 features, not 16
  const Tensor before = t.weight("W1").clone();
  try {
    t.step(mine);
    FAIL() << "a bad input on rank 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::memcmp(before.raw(), t.weight("W1").raw(), before.nbytes()), 0);
  // The ranks are still in step: a good batch trains.
  t.step(half(b, t.rank()));
  EXPECT_EQ(t.steps(), 1);
}

TEST(Distributed, CsrOnOneRankOnlyFailsEveryRank) {
  // Rank 1 feeds x as a CSR matrix (its weight would get a row-sparse gradient), rank 0 dense:
  // their gradients would not line up.
  Trainer t(mlp_model("mlp.onnx"), with({}, {}));
  NamedValues mine = half(mlp_batch(0), t.rank());
  if (t.rank() == 1) mine[0].second = CsrTensor::from_dense(mine[0].second.tensor());
  try {
    t.step(mine);
    FAIL() << "dense on rank 0 and CSR on rank 1 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CSR"), std::string::npos) << e.what();
  }
  t.step(half(mlp_batch(0), t.rank()));
  EXPECT_EQ(t.steps(), 1);
}

TEST(Distributed, DifferentModelsFailOnEveryRank) {
  const std::string a = mlp_model("mlp.onnx"), b = mlp_model("mlp_other.onnx", 7);
  try {
    Trainer t(world_rank() == 0 ? a : b, with({}, {}));
    FAIL() << "ranks with different models were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different model"), std::string::npos) << e.what();
  }
}

TEST(Distributed, DifferentOptionsFailOnEveryRank) {
  try {
    Trainer t(mlp_model("mlp.onnx"),
              with({{"learning_rate", world_rank() == 0 ? "0.01" : "0.02"}}, {}));
    FAIL() << "ranks with different options were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("learning_rate"), std::string::npos) << e.what();
  }
}

TEST(Distributed, RankZeroWritesAndEveryRankLoads) {
  const std::string model = mlp_model("mlp.onnx");
  const std::string ckpt = shared_path("ckpt"), exported = shared_path("tuned.onnx");
  if (world_rank() == 0) {
    fs::remove(ckpt);
    fs::remove(exported);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Trainer t(model, with({{"optimizer", "adam"}}, {}));
  for (int s = 0; s < 3; ++s) t.step(half(mlp_batch(s), t.rank()));
  t.save_checkpoint(ckpt);
  t.export_model(exported);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(fs::exists(ckpt));
  EXPECT_TRUE(fs::exists(exported));
  const Tensor trained = t.weight("W1").clone();
  t.step(half(mlp_batch(3), t.rank()));
  t.load_checkpoint(ckpt);
  EXPECT_EQ(t.steps(), 3);
  EXPECT_EQ(std::memcmp(trained.raw(), t.weight("W1").raw(), trained.nbytes()), 0);
  // A checkpoint rank 0 cannot read fails on every rank.
  EXPECT_THROW(t.load_checkpoint(ckpt + ".missing"), Error);
  t.step(half(mlp_batch(4), t.rank()));  // still in step
}

TEST(Distributed, AccumulationAcrossRanks) {
  // Two ranks × two micro-batches: the mean of four quarters.
  const std::string model = mlp_model("mlp.onnx");
  Trainer dist(model, with({{"optimizer", "sgd"}, {"accumulate_steps", "2"}}, {}));
  Trainer whole(model, with({{"optimizer", "sgd"}, {"distributed", "off"}}, {}));
  for (int s = 0; s < 5; ++s) {
    const NamedValues b = mlp_batch(s);
    const NamedValues mine = half(b, dist.rank());
    dist.step(half(mine, 0));
    EXPECT_EQ(dist.steps(), s);
    dist.step(half(mine, 1));
    EXPECT_EQ(dist.steps(), s + 1);
    whole.step(b);
  }
  for (int64_t i = 0; i < whole.weight("W1").numel(); ++i)
    ASSERT_NEAR(dist.weight("W1").data<float>()[i], whole.weight("W1").data<float>()[i], 1e-5);
}

// The failure modes, run by kill_and_leave_test.sh. Rank 0 checkpoints after every step.
int failure_mode(const std::string& mode, const std::string& dir) {
  const std::string model = (fs::path(dir) / "mlp.onnx").string();
  const std::string ckpt = (fs::path(dir) / "ckpt").string();
  if (mode == "write") {
    mlp_builder(1).save(model);
    return 0;
  }
  if (mode == "load") {
    Trainer t(model, {{"distributed", "off"}});
    t.load_checkpoint(ckpt);
    std::printf("checkpoint at step %lld loads\n", static_cast<long long>(t.steps()));
    return t.steps() > 0 ? 0 : 1;
  }
  auto t = std::make_unique<Trainer>(model, TrainOptions{{"threads", "1"}});
  for (int s = 0;; ++s) {
    if (s == 5 && t->rank() == 1) {
      if (mode == "kill") raise(SIGKILL);
      t.reset();  // "leave": the trainer goes, the program returns
      std::fprintf(stderr, "rank 1 leaves at step 5\n");
      return 0;
    }
    t->step(half(mlp_batch(s % 20), t->rank()));
    t->save_checkpoint(ckpt);
    if (s > 100000) return 1;
  }
}

}  // namespace
}  // namespace volt

int main(int argc, char** argv) {
  if (argc >= 3) {  // volt initializes MPI itself, and finalizes it at exit
    try {
      return volt::failure_mode(argv[1], argv[2]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
