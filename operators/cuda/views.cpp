// Reshape, Flatten, Squeeze, Unsqueeze and Identity on the device: their outputs are views of
// their inputs (Tensor::reshaped keeps the device), so the CPU kernels serve as they are,
// registered again for cuda with their shape inputs read on the host.
#include "operators/cuda/cuda_kernel.hpp"

namespace volt::cuda {
namespace {

struct RegisterViews {
  RegisterViews() {
    KernelRegistry& registry = KernelRegistry::instance();
    const std::pair<const char*, std::vector<int>> views[] = {
        {"Reshape", {1}}, {"Flatten", {}}, {"Squeeze", {1}}, {"Unsqueeze", {1}}, {"Identity", {}}};
    for (const auto& [op, host_inputs] : views)
      for (const KernelDef* cpu : registry.find(kOnnxDomain, op, "cpu")) {
        if (!cpu->output_aliases_input) continue;  // only kernels whose output is a view
        KernelDef def = *cpu;
        def.name = std::string("cuda_") + cpu->name;
        def.device = "cuda";
        def.host_inputs = host_inputs;
        registry.add(std::move(def));
      }
  }
} g_register_views;

}  // namespace
}  // namespace volt::cuda
