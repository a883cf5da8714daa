// Binding named values to a graph's inputs, with the checks every entry point shares:
// unknown names, missing inputs, wrong kind, dtype or shape.
#pragma once
#include <string>
#include <vector>

#include "runtime/compiled_graph.hpp"
#include "volt/volt.hpp"

namespace volt {

void check_feed(const ValueInfo& info, const Value& v, const std::string& source);

// Values by id for `cg`. `values` must outlive the result. Graph inputs without an initializer
// must be given (empty optionals are filled in from `empties`, which must outlive it too).
std::vector<const Value*> bind_feeds(const CompiledGraph& cg, const NamedValues& values,
                                     const std::string& source, std::vector<Value>& empties);

}  // namespace volt
