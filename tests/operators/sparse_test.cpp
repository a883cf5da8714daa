// CSR inputs: construction checks, sparse × dense products against the dense path, and the
// explicit Densify step for every other consumer.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

Session session_of(const ModelBuilder& b) {
  const std::string bytes = b.bytes();
  const SessionOptions o = testing::test_options();
  return Session::from_bytes(bytes.data(), bytes.size(), o);
}

// A random [rows, cols] matrix with about `density` non-zeros, some rows left empty, and the
// column order within rows shuffled (CSR does not require sorted columns).
CsrTensor random_csr(int64_t rows, int64_t cols, double density, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1, 1);
  std::bernoulli_distribution keep(density), empty_row(0.2);
  std::vector<int64_t> off{0}, col;
  std::vector<float> val;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> row;
    if (!empty_row(rng))
      for (int64_t c = 0; c < cols; ++c)
        if (keep(rng)) row.push_back(c);
    std::shuffle(row.begin(), row.end(), rng);
    for (int64_t c : row) {
      col.push_back(c);
      val.push_back(value(rng));
    }
    off.push_back(static_cast<int64_t>(col.size()));
  }
  return CsrTensor::copy_of(DType::Float, rows, cols, static_cast<int64_t>(val.size()), off.data(),
                            col.data(), val.data());
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void expect_close(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i)
    // Sums of up to K products in a different order: 1e-5 relative to the term sizes.
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i],
                1e-5f * (1.0f + std::fabs(want.data<float>()[i])))
        << "element " << i;
}

TEST(Csr, BadStructureIsAClearError) {
  const int64_t cols_ok[2] = {0, 1};
  const float vals[2] = {1, 2};
  auto make = [&](int64_t rows, int64_t cols, int64_t nnz, std::vector<int64_t> off,
                  const int64_t* col) {
    return CsrTensor::copy_of(DType::Float, rows, cols, nnz, off.data(), col, vals);
  };
  EXPECT_VOLT_ERROR(make(2, 2, 2, {0, 2, 1}, cols_ok), InvalidArgument, "decrease at row 1");
  EXPECT_VOLT_ERROR(make(2, 2, 2, {0, 1, 1}, cols_ok), InvalidArgument, "end at 1", "nnz = 2");
  EXPECT_VOLT_ERROR(make(2, 2, 2, {1, 1, 2}, cols_ok), InvalidArgument, "start at 0");
  const int64_t cols_bad[2] = {0, 5};
  EXPECT_VOLT_ERROR(make(2, 2, 2, {0, 1, 2}, cols_bad), InvalidArgument,
                    "column index 5 at position 1", "[0, 2)");
  const int64_t cols_neg[2] = {-1, 0};
  EXPECT_VOLT_ERROR(make(2, 2, 2, {0, 1, 2}, cols_neg), InvalidArgument, "column index -1");
  EXPECT_VOLT_ERROR(make(-1, 2, 0, {0}, cols_ok), InvalidArgument, "negative size");
  EXPECT_VOLT_ERROR(make(2, -3, 0, {0, 0, 0}, cols_ok), InvalidArgument, "negative size");
  EXPECT_VOLT_ERROR(make(2, 2, -1, {0, 0, 0}, cols_ok), InvalidArgument, "negative size");
  EXPECT_VOLT_ERROR(
      CsrTensor::create(2, 2, Tensor::from<int64_t>({0, 1}, {2}), Tensor::from<int64_t>({0}, {1}),
                        Tensor::from<float>({1}, {1})),
      InvalidArgument, "want rows + 1 = 3");
  EXPECT_VOLT_ERROR(
      CsrTensor::create(1, 2, Tensor::from<int64_t>({0, 1}, {2}),
                        Tensor::from<int64_t>({0, 1}, {2}), Tensor::from<float>({1}, {1})),
      InvalidArgument, "2 column indices for 1 values");
}

TEST(Csr, UnsortedColumnsAndDuplicatesAreAccepted) {
  const int64_t off[3] = {0, 3, 3};
  const int64_t col[3] = {2, 0, 2};
  const float val[3] = {1, 2, 3};
  const CsrTensor c = CsrTensor::copy_of(DType::Float, 2, 3, 3, off, col, val);
  const Tensor d = c.to_dense();
  const float want[6] = {2, 0, 4, 0, 0, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d.data<float>()[i], want[i]);
  const CsrTensor back = CsrTensor::from_dense(d);
  EXPECT_EQ(back.nnz(), 2);
  EXPECT_EQ(back.to_dense().data<float>()[2], 4.0f);
}

// MatMul(X, W) fed with X as CSR and as dense: the same result, on awkward shapes.
TEST(Csr, MatMulWithACsrInputMatchesTheDensePath) {
  std::mt19937 rng(1);
  struct Case {
    int64_t rows, cols, n;
    double density;
  };
  for (const Case& c :
       {Case{37, 53, 19, 0.1}, Case{1, 1, 1, 1.0}, Case{8, 1, 5, 0.5}, Case{16, 300, 64, 0.01},
        Case{5, 7, 3, 0.0}, Case{0, 4, 3, 0.5}, Case{300, 1000, 33, 0.05}}) {
    ModelBuilder b;
    b.input("x", 1, {-1, c.cols}).output_any("y", 1).node("MatMul", {"x", "W"}, {"y"});
    b.initializer("W", {c.cols, c.n}, random_floats(static_cast<size_t>(c.cols * c.n), rng));
    Session s = session_of(b);
    const CsrTensor x = random_csr(c.rows, c.cols, c.density, rng);
    const Tensor sparse = s.run({{"x", x}})[0].tensor();
    const Tensor dense = s.run({{"x", x.to_dense()}})[0].tensor();
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + " nnz " +
                 std::to_string(x.nnz()));
    expect_close(sparse, dense);
  }
}

TEST(Csr, GemmWithTransposedWeightsAlphaBetaAndBias) {
  std::mt19937 rng(2);
  for (const std::vector<int64_t>& bias : {std::vector<int64_t>{24}, std::vector<int64_t>{1, 24},
                                           std::vector<int64_t>{13, 1}, std::vector<int64_t>{}}) {
    ModelBuilder b;
    b.input("x", 1, {13, 40}).output_any("y", 1);
    b.node("Gemm", {"x", "W", "C"}, {"y"}, [](auto& n) {
      ModelBuilder::set_int(n, "transB", 1);
      ModelBuilder::set_float(n, "alpha", 0.5f);
      ModelBuilder::set_float(n, "beta", 2.0f);
    });
    b.initializer("W", {24, 40}, random_floats(24 * 40, rng));
    int64_t nc = 1;
    for (int64_t d : bias) nc *= d;
    b.initializer("C", bias, random_floats(static_cast<size_t>(nc), rng));
    Session s = session_of(b);
    const CsrTensor x = random_csr(13, 40, 0.2, rng);
    expect_close(s.run({{"x", x}})[0].tensor(), s.run({{"x", x.to_dense()}})[0].tensor());
  }
}

// Relu cannot read CSR: it gets the dense copy, which the profile shows as a Densify step;
// the MatMul beside it stays sparse.
TEST(Csr, OtherConsumersReadAnExplicitDenseCopy) {
  std::mt19937 rng(3);
  ModelBuilder b;
  b.input("x", 1, {-1, 30}).output_any("y", 1).output_any("r", 1);
  b.node("MatMul", {"x", "W"}, {"y"}, {}, "mm").node("Relu", {"x"}, {"r"}, {}, "relu");
  b.initializer("W", {30, 4}, random_floats(120, rng));
  Session s = session_of(b);
  const CsrTensor x = random_csr(9, 30, 0.3, rng);
  RunProfile profile;
  RunOptions ro;
  ro.profile = &profile;
  const auto out = s.run({{"x", x}}, {}, ro);
  const auto want = s.run({{"x", x.to_dense()}});
  expect_close(out[0].tensor(), want[0].tensor());
  expect_close(out[1].tensor(), want[1].tensor());
  std::vector<std::string> kernels;
  for (const auto& e : profile.events) kernels.push_back(e.op + ":" + e.kernel);
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "Densify:densify"), 1);
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "MatMul:sparse_matmul"), 1);
  EXPECT_EQ(kernels.size(), 3u);
  // Feeding a CSR matrix where a 3-D input is declared, or of the wrong dtype, is refused.
  ModelBuilder c;
  c.input("x", 1, {2, 3, 4}).output_any("y", 1).node("Relu", {"x"}, {"y"});
  EXPECT_VOLT_ERROR(session_of(c).run({{"x", random_csr(2, 3, 0.5, rng)}}), InvalidArgument,
                    "only feed a 2-D input");
  const int64_t off[2] = {0, 0};
  EXPECT_VOLT_ERROR(
      s.run({{"x", CsrTensor::copy_of(DType::Double, 1, 30, 0, off, nullptr, nullptr)}}),
      InvalidArgument, "must be float32, got float64");
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// A COO sparse_initializer of the given dense contents (zeros left out).
void add_sparse_initializer(ModelBuilder& b, const std::string& name, int64_t rows, int64_t cols,
                            const std::vector<float>& dense) {
  auto* s = b.proto().mutable_graph()->add_sparse_initializer();
  s->add_dims(rows);
  s->add_dims(cols);
  auto* values = s->mutable_values();
  values->set_name(name);
  values->set_data_type(onnx::TensorProto::FLOAT);
  auto* indices = s->mutable_indices();
  indices->set_data_type(onnx::TensorProto::INT64);
  int64_t nnz = 0;
  for (size_t i = 0; i < dense.size(); ++i)
    if (dense[i] != 0) {
      values->add_float_data(dense[i]);
      indices->add_int64_data(static_cast<int64_t>(i));
      ++nnz;
    }
  values->add_dims(nnz);
  indices->add_dims(nnz);
}

// y = x · S and z = S2 · x2 with S, S2 sparse weights: the same as with dense weights, and the
// products run on the sparse kernel.
TEST(Csr, SparseInitializersFeedingMatMulStaySparse) {
  std::mt19937 rng(9);
  std::bernoulli_distribution keep(0.1);
  std::uniform_real_distribution<float> u(-1, 1);
  auto sparse_values = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = keep(rng) ? u(rng) : 0.0f;
    return v;
  };
  const std::vector<float> s = sparse_values(40 * 6), s2 = sparse_values(5 * 40);
  auto model = [&](bool sparse) {
    ModelBuilder b;
    b.input("x", 1, {3, 40}).input("x2", 1, {40, 7}).output_any("y", 1).output_any("z", 1);
    b.node("MatMul", {"x", "S"}, {"y"}, {}, "xs").node("MatMul", {"S2", "x2"}, {"z"}, {}, "sx");
    if (sparse) {
      add_sparse_initializer(b, "S", 40, 6, s);
      add_sparse_initializer(b, "S2", 5, 40, s2);
    } else {
      b.initializer("S", {40, 6}, s).initializer("S2", {5, 40}, s2);
    }
    return session_of(b);
  };
  Session sparse = model(true), dense = model(false);
  const NamedValues feeds{{"x", Tensor::from(random_floats(120, rng), {3, 40})},
                          {"x2", Tensor::from(random_floats(280, rng), {40, 7})}};
  RunProfile profile;
  RunOptions ro;
  ro.profile = &profile;
  const auto got = sparse.run(feeds, {}, ro);
  const auto want = dense.run(feeds);
  expect_close(got[0].tensor(), want[0].tensor());
  expect_close(got[1].tensor(), want[1].tensor());
  int sparse_products = 0;
  for (const auto& e : profile.events) sparse_products += e.kernel == "sparse_matmul";
  EXPECT_EQ(sparse_products, 2);
}

}  // namespace
}  // namespace volt
