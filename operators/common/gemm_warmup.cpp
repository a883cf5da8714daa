#include "operators/common/gemm_warmup.hpp"

#include <omp.h>

#include <atomic>
#include <vector>

#include "dnnl.hpp"
#include "operators/common/cpu_isa.hpp"

namespace volt {

std::jthread start_gemm_warmup() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return std::jthread();
  try {
    return std::jthread([] {
      try {
        omp_set_num_threads(1);  // (this thread's own team: no threads taken from the runs)
        // oneDNN makes its kernels lazily by path: one product of each transposition for the
        // main kernels, and the 2x2 ones for those of the smallest sizes (a 2-token sentence
        // cost 3 ms more without them).
        std::vector<float> a(64 * 64, 1.0f), c(64 * 64);
        for (const int n : {64, 2})
          for (const char ta : {'N', 'T'})
            for (const char tb : {'N', 'T'})
              dnnl_sgemm(ta, tb, n, n, n, 1.0f, a.data(), n, a.data(), n, 0.0f, c.data(), n);
      } catch (...) {  // (nothing is lost: the first product generates what is missing)
      }
    });
  } catch (const std::system_error&) {  // no thread to be had: the first product pays
    return std::jthread();
  }
}

bool products_need_gemm_code(bool shapes_vary) {
  return shapes_vary || !cpu_has_avx512();
}

}  // namespace volt
