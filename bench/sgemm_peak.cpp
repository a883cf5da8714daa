// The machine's fp32 matrix-multiply peak as oneDNN reaches it: a 2048³ sgemm (and bf16, with
// fp32 accumulation) on the given threads, best of several runs. compare.py prints it beside
// ResNet-50's achieved GFLOP/s, so "how close to the machine" is measured, not assumed. A type
// oneDNN has no matmul for on this CPU (bf16 before AVX-512) is reported as null.
//   volt_sgemm_peak [--threads T]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <dnnl.hpp>
#include <string>

namespace {

// GFLOP/s, or a negative number where oneDNN has no matmul for `dt` on this CPU.
double best_gflops(dnnl::memory::data_type dt) try {
  using tag = dnnl::memory::format_tag;
  const int64_t n = 2048;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a({n, n}, dt, tag::ab), b({n, n}, dt, tag::any),
      c({n, n}, dnnl::memory::data_type::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine);
  dnnl::memory am(a, engine), bm(pd.weights_desc(), engine), cm(c, engine);
  std::memset(am.get_data_handle(), 0, a.get_size());
  std::memset(bm.get_data_handle(), 0, pd.weights_desc().get_size());
  const dnnl::matmul mm(pd);
  double best = 0;
  for (int run = 0; run < 8; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run > 0) best = std::max(best, 2.0 * n * n * n / s / 1e9);  // the first run warms up
  }
  return best;
} catch (const dnnl::error&) {
  return -1;
}

std::string json_number(double v) {
  return v < 0 ? "null" : std::to_string(v);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--threads") omp_set_num_threads(std::stoi(argv[i + 1]));
  std::printf("{\"sgemm_gflops\": %s, \"bf16_gemm_gflops\": %s, \"threads\": %d}\n",
              json_number(best_gflops(dnnl::memory::data_type::f32)).c_str(),
              json_number(best_gflops(dnnl::memory::data_type::bf16)).c_str(),
              omp_get_max_threads());
  return 0;
}
