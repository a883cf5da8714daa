// Helpers shared by the volt subcommands: argument parsing, input generation, summaries.
#pragma once
#include <map>
#include <random>
#include <string>
#include <vector>

#include "volt/volt.hpp"

namespace volt::cli {

// Arguments after the subcommand: positionals and --flag value / --flag=value / --switch.
struct Args {
  std::vector<std::string> positional;
  std::multimap<std::string, std::string> flags;
  bool has(const std::string& k) const { return flags.count(k) != 0; }
  std::string get(const std::string& k, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& k) const;
  int get_int(const std::string& k, int fallback) const;
  double get_double(const std::string& k, double fallback) const;
};
// The session options every running subcommand takes: --threads T, --precision P,
// --memory-limit BYTES (suffixes K, M, G allowed), --calibrate NAME=FILE.npy (precision int8).
SessionOptions session_options_from(const Args& args);
// The run options: --timeout-ms MS.
RunOptions run_options_from(const Args& args);

struct Command;
// The arguments after argv[first], read against `command`'s options: an option it does not have
// is an error that names it and suggests the closest one it has.
Args parse_args(int argc, char** argv, int first, const Command& command);
// "; did you mean 'X'?" for the candidate nearest `word` by edit distance, when one is near.
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates,
                       const std::string& prefix = "");

// "NAME=1x3x224x224" entries -> shapes by input name.
std::map<std::string, Shape> parse_shapes(const std::vector<std::string>& specs);
// "NAME=LO:HI" entries -> integer ranges for random integer inputs.
std::map<std::string, std::pair<int64_t, int64_t>> parse_ranges(
    const std::vector<std::string>& specs);

// The concrete shape for an input: --shape override, else declared dims with symbolic ones
// set to `batch` (the first) or 1.
Shape concrete_shape(const ValueInfo& info, const std::map<std::string, Shape>& overrides,
                     int64_t batch);

// A random tensor of the input's dtype: floats uniform in [-1, 1], integers in [lo, hi).
Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937_64& rng,
                     std::pair<int64_t, int64_t> range = {0, 10});

// The inputs of a run: --input NAME=FILE.npy (or NAME=random) where given, else random tensors
// of --shape NAME=DIMS (declared dims, symbolic ones set to `batch`), integers in --range
// NAME=LO:HI; the random ones from `seed`. An --input naming no input of the model is an error.
NamedValues feeds_from(const Args& args, const Session& session, int64_t batch, uint64_t seed);

// "float32[1,10] min=-1.2 max=3.4 mean=0.5 [0.1, 0.2, ...]"
std::string summarize(const Value& v);

// Letters, digits, '.', '_' and '-' kept; everything else becomes '_'.
std::string safe_file_name(const std::string& name);

}  // namespace volt::cli
