// Runs a Plan: a loop over its steps with one arena per run.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <vector>

#include "runtime/plan.hpp"

namespace volt {

// Inputs by value id (nullptr where not fed); returns the graph outputs in graph order.
// Outputs never alias the arena, a constant or an input: the caller owns them.
// `observer`, when given, sees each graph output (its index in the graph outputs, its value) as
// soon as the step computing it has run, on the thread running the plan: the trainer starts
// exchanging gradients while the rest of the backward pass runs.
using OutputObserver = std::function<void(size_t, const Value&)>;
std::vector<Value> execute_plan(const Plan& plan, const std::vector<const Value*>& fed,
                                const OutputObserver* observer = nullptr);

}  // namespace volt
