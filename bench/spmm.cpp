// Sparse × dense: a CSR [rows × cols] input times a dense [cols × n] weight through volt's
// sparse kernel, against the same product on the densified input through oneDNN's dense
// matmul (volt's dense MatMul path), side by side in one run.
//   volt_spmm [--rows 4096] [--cols 100000] [--n 64] [--densities 0.001,0.01,0.1] [--runs 5]
//             [--threads T]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

volt::CsrTensor random_csr(int64_t rows, int64_t cols, double density, std::mt19937_64& rng) {
  const int64_t per_row = std::max<int64_t>(1, static_cast<int64_t>(std::llround(density * cols)));
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  std::uniform_real_distribution<float> val(-1, 1);
  std::vector<int64_t> off(static_cast<size_t>(rows) + 1), idx;
  std::vector<float> values;
  idx.reserve(static_cast<size_t>(rows * per_row));
  values.reserve(idx.capacity());
  for (int64_t r = 0; r < rows; ++r) {
    off[static_cast<size_t>(r)] = static_cast<int64_t>(idx.size());
    std::vector<int64_t> row(static_cast<size_t>(per_row));
    for (auto& c : row) c = col(rng);
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    for (int64_t c : row) {
      idx.push_back(c);
      values.push_back(val(rng));
    }
  }
  off.back() = static_cast<int64_t>(idx.size());
  return volt::CsrTensor::copy_of(volt::DType::Float, rows, cols,
                                  static_cast<int64_t>(values.size()), off.data(), idx.data(),
                                  values.data());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 4096, cols = 100000, n = 64;
  int runs = 5, threads = 0;
  std::vector<double> densities = {0.001, 0.01, 0.1};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rows")
      rows = std::stoll(v);
    else if (k == "--cols")
      cols = std::stoll(v);
    else if (k == "--n")
      n = std::stoll(v);
    else if (k == "--runs")
      runs = std::stoi(v);
    else if (k == "--threads")
      threads = std::stoi(v);
    else if (k == "--densities") {
      densities.clear();
      std::stringstream ss(v);
      std::string d;
      while (std::getline(ss, d, ',')) densities.push_back(std::stod(d));
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::mt19937_64 rng(1);
  volt::testing::ModelBuilder b;
  b.input("x", 1, {-1, cols}).output_any("y", 1).node("MatMul", {"x", "W"}, {"y"});
  std::vector<float> w(static_cast<size_t>(cols * n));
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& x : w) x = u(rng);
  b.initializer("W", {cols, n}, w);
  const std::string bytes = b.bytes();
  volt::SessionOptions o;
  o.threads = threads;
  volt::Session s = volt::Session::from_bytes(bytes.data(), bytes.size(), o);

  std::printf("CSR [%lld x %lld] x dense [%lld x %lld], %d runs each (median), threads %d\n",
              static_cast<long long>(rows), static_cast<long long>(cols),
              static_cast<long long>(cols), static_cast<long long>(n), runs, threads);
  std::printf(
      "| density | nnz | volt sparse ms | oneDNN dense ms (densified input) | speed-up | max "
      "rel diff |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (double density : densities) {
    const volt::CsrTensor x = random_csr(rows, cols, density, rng);
    const volt::Tensor dense = x.to_dense();
    const volt::NamedValues sparse_feed{{"x", x}}, dense_feed{{"x", dense}};
    volt::Tensor ys = s.run(sparse_feed)[0].tensor(), yd = s.run(dense_feed)[0].tensor();  // warm
    std::vector<double> ts, td;
    for (int r = 0; r < runs; ++r) {  // alternating, so drift hits both alike
      auto t0 = Clock::now();
      ys = s.run(sparse_feed)[0].tensor();
      ts.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      t0 = Clock::now();
      yd = s.run(dense_feed)[0].tensor();
      td.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    double max_rel = 0, scale = 0;
    for (int64_t i = 0; i < yd.numel(); ++i)
      scale = std::max(scale, std::fabs(double(yd.data<float>()[i])));
    for (int64_t i = 0; i < yd.numel(); ++i)
      max_rel = std::max(max_rel, std::fabs(double(ys.data<float>()[i]) - yd.data<float>()[i]) /
                                      (scale > 0 ? scale : 1));
    const double ms = median(ts), md = median(td);
    std::printf("| %.1f%% | %lld | %.2f | %.2f | %.1fx | %.1e |\n", density * 100,
                static_cast<long long>(x.nnz()), ms, md, md / ms, max_rel);
    std::fflush(stdout);
  }
  return 0;
}
