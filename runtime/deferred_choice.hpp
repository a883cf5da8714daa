// What a step whose shapes are known only at run time (downstream of a Loop's outputs, NonZero,
// a data-dependent Reshape) chose at its last run: the kernel, its prepared state and the output
// types. Such a step chooses and prepares its kernel at every run; where a run's inputs have the
// types of the last one, and every input value the choice read is a constant of the plan, the
// choice is the same (kernel choice and infer() are functions of the input types and the values
// they read) and is taken as it is. A deep-and-cross recommender exported from PyTorch (its
// EmbeddingBags as Loops) ran its MLP's Gemms on weights packed again at every run: 1.3 ms a run
// against ORT's 0.34. Choices that read a value computed by the run (a Reshape's target) are not
// kept: a state may point into the values its infer() read.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "operators/kernel.hpp"
#include "operators/registry.hpp"

namespace volt {

struct DeferredChoice {
  const KernelDef* def = nullptr;
  const Kernel* kernel = nullptr;
  std::shared_ptr<void> state;
  std::vector<TypeShape> outputs;
  size_t scratch_bytes = 0;
  std::string reference;
  bool output_is_view = false;  // output 0 is a view of input 0 (InferContext::output_views_input)
};

class DeferredChoices {
 public:
  // The last run's choice, if `types` are its input types (null entries for omitted inputs).
  std::shared_ptr<const DeferredChoice> find(std::span<const TypeShape> types,
                                             std::span<const Value* const> values) const;
  // Keeps `choice` for runs whose inputs have `types` and returns it; `read` says which inputs'
  // values the choice read (InferContext::input_value), all of them constants of the plan (the
  // caller keeps no other choice).
  std::shared_ptr<const DeferredChoice> remember(std::span<const TypeShape> types,
                                                 std::span<const Value* const> values,
                                                 uint64_t read, DeferredChoice choice);

 private:
  struct Entry {
    std::vector<TypeShape> types;
    std::vector<const Value*> read_constants;  // by input: the constant read, else null
    DeferredChoice choice;
  };
  mutable std::mutex mutex_;
  std::shared_ptr<const Entry> last_;
};

}  // namespace volt
