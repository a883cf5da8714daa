#include "operators/common/cpu_isa.hpp"

#include <dnnl.hpp>

#include <algorithm>
#include <initializer_list>

namespace volt {

namespace {
bool isa_is_one_of(std::initializer_list<dnnl::cpu_isa> isas) {
  return std::find(isas.begin(), isas.end(), dnnl::get_effective_cpu_isa()) != isas.end();
}
}  // namespace

bool cpu_has_avx512() {
  using isa = dnnl::cpu_isa;
  static const bool yes = isa_is_one_of(
      {isa::avx512_core, isa::avx512_core_vnni, isa::avx512_core_bf16, isa::avx512_core_amx});
  return yes;
}

bool cpu_has_exact_int8_dot() {
  using isa = dnnl::cpu_isa;
  static const bool yes = isa_is_one_of(
      {isa::avx2_vnni, isa::avx512_core_vnni, isa::avx512_core_bf16, isa::avx512_core_amx});
  return yes;
}

bool cpu_has_bf16_kernels() {
  return cpu_has_avx512();
}

bool cpu_has_f16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}

bool cpu_has_avx512f() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

bool cpu_has_avx512_vbmi() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vbmi");
  return yes;
}

}  // namespace volt
