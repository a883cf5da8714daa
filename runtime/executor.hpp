// Runs a Plan: a loop over its steps with one arena per run.
#pragma once
#include <atomic>
#include <chrono>
#include <vector>

#include "runtime/plan.hpp"

namespace volt {

// Inputs by value id (nullptr where not fed); returns the graph outputs in graph order.
// Outputs never alias the arena, a constant or an input: the caller owns them.
std::vector<Value> execute_plan(const Plan& plan, const std::vector<const Value*>& fed);

}  // namespace volt
