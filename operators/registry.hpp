// The one kernel registry: (domain, op_type, opset range, device, dtype) -> kernel factory.
// Registration sits at the bottom of the file that defines the kernel:
//
//   VOLT_REGISTER_KERNEL(relu, {.op = "Relu", .since = 6, .types = kFloatTypes, .create = ...});
#pragma once
#include <climits>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "operators/kernel.hpp"

namespace volt {

struct KernelDef {
  std::string name;  // set at registration: the id given to VOLT_REGISTER_KERNEL
  std::string domain = kOnnxDomain;
  std::string op;
  int since = 1;        // first opset version this kernel implements
  int until = INT_MAX;  // last opset version
  std::string device = "cpu";
  std::vector<DType> types;  // accepted dtypes of input `type_input`; empty: any
  int type_input = 0;
  int priority = 0;  // higher is tried first (oneDNN before reference)
  // Output 0 is a view of input 0's buffer (Reshape family): the planner allocates nothing.
  bool output_aliases_input = false;
  // Output 0 may be written over input `inplace_input` when that input dies here.
  int inplace_input = -1;
  // False for ops whose output must not be computed at plan time (random generators).
  bool foldable = true;
  // Computed at plan time from constant inputs whatever their size: the upload of a weight to an
  // accelerator (once per plan, not per run).
  bool fold_always = false;
  // Reads only its inputs' dtype and shape (Shape, Size): inputs may live on any device.
  bool reads_metadata_only = false;
  // Moves its input between devices (the copy nodes): the executor hands it inputs as they are.
  bool moves_between_devices = false;
  // For device kernels: inputs read on the host (a Reshape's shape, a Slice's starts), which the
  // place_on_device pass leaves in host memory.
  std::vector<int> host_inputs;
  // Input 0 is a CSR matrix (sparse × dense kernels, Densify): chosen only then. Kernels
  // without it never see a sparse input.
  bool csr_input0 = false;
  // Taken only when an input holds at least this many elements (oneDNN's elementwise
  // primitives, whose fixed cost dominates below): checked before infer(), where declining
  // costs an exception, for each small node of each plan.
  int64_t min_elements = 0;
  // Generates code for the exact shapes it is planned for (oneDNN's binary primitives, about
  // 20 us each), and another kernel of the op needs none: skipped in a plan built for one of
  // several input shapes (InferContext::shapes_vary), so that a new shape costs no code
  // generation for the node.
  bool shape_specific = false;
  std::function<std::unique_ptr<Kernel>(const Node&)> create;

  // Whether this kernel takes inputs of these types (dtype of `type_input`, sparse or dense);
  // a null entry is an omitted input.
  bool accepts(std::span<const TypeShape* const> in_types) const;
  // Whether it is a kernel for this node (op type aside: see KernelRegistry::named) on this
  // device: its domain and opset range.
  bool matches(const Node& node, const std::string& on_device) const {
    return domain == node.domain && device == on_device && node.opset >= since &&
           node.opset <= until;
  }
};

class KernelRegistry {
 public:
  static KernelRegistry& instance();
  void add(KernelDef def);
  // Kernels for this node on this device, best first, filtered by dtype when it is known.
  std::vector<const KernelDef*> candidates(const Node& node, const std::string& device,
                                           DType type = DType::Undefined) const;
  // Every kernel registered for this op type, best first, before the filters candidates()
  // applies (KernelDef::matches): what planning each node of each plan walks, without a copy.
  const std::vector<const KernelDef*>& named(const std::string& op_type) const;
  bool has_op(const std::string& domain, const std::string& op, int opset,
              const std::string& device) const;
  // The kernels registered for (domain, op) on `device`, any opset.
  std::vector<const KernelDef*> find(const std::string& domain, const std::string& op,
                                     const std::string& device) const;
  // Every registered (domain, op) once, for listings.
  std::vector<std::pair<std::string, std::string>> ops() const;

 private:
  std::vector<std::unique_ptr<KernelDef>> defs_;  // by priority, highest first
  // The same definitions by op name, in the same order: every plan asks for each node's
  // candidates, and a scan of all definitions was a tenth of the cost of planning a new shape.
  std::unordered_map<std::string, std::vector<const KernelDef*>> by_op_;
};

struct KernelRegistrar {
  KernelRegistrar(const char* name, KernelDef def) {
    def.name = name;
    KernelRegistry::instance().add(std::move(def));
  }
};

// Registers a kernel under `id`, the name profiles report for it.
#define VOLT_REGISTER_KERNEL(id, ...)                               \
  static const ::volt::KernelRegistrar volt_kernel_registrar_##id { \
#id, __VA_ARGS__                                                \
  }

// A kernel factory for kernels constructed from the node.
template <class K>
std::unique_ptr<Kernel> make_kernel(const Node& n) {
  return std::make_unique<K>(n);
}

// The domain of volt's own kernels (backward kernels emitted by operators/grad/).
inline const std::string kVoltDomain = "ai.volt";

// A kernel of volt's own domain, any dtype.
inline KernelDef volt_kernel(const char* op,
                             std::function<std::unique_ptr<Kernel>(const Node&)> create) {
  return {.domain = kVoltDomain, .op = op, .create = std::move(create)};
}

// Common dtype sets.
inline const std::vector<DType> kFloatTypes = {DType::Float, DType::Double, DType::Float16,
                                               DType::BFloat16};
inline const std::vector<DType> kNumericTypes = {
    DType::Float, DType::Double, DType::Float16, DType::BFloat16, DType::Int8,   DType::Int16,
    DType::Int32, DType::Int64,  DType::UInt8,   DType::UInt16,   DType::UInt32, DType::UInt64};

}  // namespace volt
