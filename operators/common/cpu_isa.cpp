#include "operators/common/cpu_isa.hpp"

#include <dnnl.hpp>

namespace volt {

bool cpu_has_avx512() {
  using isa = dnnl::cpu_isa;
  static const bool yes = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case isa::avx512_core:
      case isa::avx512_core_vnni:
      case isa::avx512_core_bf16:
      case isa::avx512_core_amx:
        return true;
      default:
        return false;
    }
  }();
  return yes;
}

bool cpu_has_exact_int8_dot() {
  using isa = dnnl::cpu_isa;
  static const bool yes = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case isa::avx2_vnni:
      case isa::avx512_core_vnni:
      case isa::avx512_core_bf16:
      case isa::avx512_core_amx:
        return true;
      default:
        return false;
    }
  }();
  return yes;
}

bool cpu_has_bf16_kernels() {
  return cpu_has_avx512();
}

}  // namespace volt
