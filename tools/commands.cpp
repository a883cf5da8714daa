#include "tools/commands.hpp"

#include <algorithm>

namespace volt::cli {

namespace {

std::vector<Option> join(std::initializer_list<std::vector<Option>> groups) {
  std::vector<Option> out;
  for (const auto& g : groups) out.insert(out.end(), g.begin(), g.end());
  return out;
}

// Read by feeds_from (cli_util.cpp).
const std::vector<Option> kFeedOptions = {
    {"input", "NAME=FILE.npy|random", "feed an input from a .npy file (repeatable)"},
    {"shape", "NAME=D1xD2...", "shape of a random input (repeatable)"},
    {"range", "NAME=LO:HI", "integer range of a random integer input (repeatable)"},
};
// Read by session_options_from and run_options_from (cli_util.cpp).
const std::vector<Option> kSessionOptions = {
    {"threads", "T", "intra-op threads (default: one per core)"},
    {"device", "cpu|cuda:N", "where to run (default cpu)"},
    {"precision", "fp32|bf16|fp16|int8", "compute precision (default fp32)"},
    {"calibrate", "NAME=FILE.npy", "with --precision int8: static scales from this batch"},
    {"winograd", "on|off", "3x3 convolutions by Winograd's algorithm (default on)"},
    {"memory-limit", "BYTES", "bytes one run may hold, like 512M or 2G"},
    {"timeout-ms", "MS", "end a run that takes longer than MS milliseconds"},
};

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> all = {
      {"info",
       "MODEL",
       "prints the model's format versions, inputs, outputs, ops and parameters",
       {},
       cmd_info},
      {"run", "MODEL", "runs the model once and prints a summary of each output",
       join({kFeedOptions,
             {{"output-dir", "DIR", "write each output there as NAME.npy"}},
             kSessionOptions}),
       cmd_run},
      {"bench", "MODEL",
       "measures latency percentiles, throughput, peak memory, load and first-run times",
       join({{{"batch", "N", "size of symbolic first dimensions (default 1)"},
              {"warmup", "W", "untimed runs first (default 5)"},
              {"iterations", "N", "timed runs (default 50)"},
              {"seconds", "S", "time runs for S seconds instead of a count"},
              {"json", "", "print the figures as JSON"},
              {"profile", "FILE", "write a chrome-trace of per-node times and print time by op"}},
             kFeedOptions,
             kSessionOptions}),
       cmd_bench},
      {"train",
       "MODEL",
       "fine-tunes the model on .npy data and reports loss and accuracy per epoch (data-parallel "
       "under mpirun)",
       {{"input", "NAME=FILE.npy", "a model input's samples, first axis (repeatable)"},
        {"label", "FILE.npy", "the labels, one per sample"},
        {"loss", "cross_entropy|mse|model_output", "the loss (default cross_entropy)"},
        {"optimizer", "sgd|adam|adamw", "the optimizer (default adam)"},
        {"learning-rate", "LR", "the learning rate (default 0.001)"},
        {"batch", "N", "samples per step, across all ranks under mpirun (default 64)"},
        {"accumulate", "N", "micro-batches of --batch per optimizer step (default 1)"},
        {"epochs", "E", "passes over the data (default 1)"},
        {"validation-split", "F", "fraction of samples held out for validation (default 0)"},
        {"checkpoint", "FILE", "write a checkpoint after each epoch"},
        {"export", "OUT.onnx", "write the tuned inference model at the end"},
        {"option", "KEY=VALUE", "any other training option of the C API (repeatable)"},
        {"threads", "T", "threads (default: one per core)"},
        {"seed", "N", "seed of shuffling and initialization"},
        {"device", "cpu|cuda:N", "where to run (default cpu)"},
        {"precision", "fp32|mixed_fp16", "compute precision (default fp32)"}},
       cmd_train},
      {"test-onnx",
       "DIR...",
       "runs ONNX backend test cases (folders of model.onnx and test_data_set_*)",
       {{"expect", "FILE", "cases that must pass, one per line; exit 1 if one fails"},
        {"verbose", "", "print every case"},
        {"device", "cpu|cuda:N", "where to run (default cpu)"}},
       cmd_test_onnx},
  };
  return all;
}

const Command* find_command(const std::string& name) {
  const auto& all = commands();
  auto it = std::find_if(all.begin(), all.end(), [&](const Command& c) { return c.name == name; });
  return it == all.end() ? nullptr : &*it;
}

std::string usage_of(const Command& c) {
  std::string out = "usage: volt " + c.name + " " + c.operands +
                    (c.options.empty() ? "" : " [options]") + "\n\n" + c.summary + "\n\noptions:\n";
  auto line = [&](const std::string& flags, const std::string& help) {
    out += "  " + flags + std::string(flags.size() < 38 ? 38 - flags.size() : 1, ' ') + help + "\n";
  };
  for (const Option& o : c.options)
    line("--" + o.name + (o.value.empty() ? "" : " " + o.value), o.help);
  line("-h, --help", "print this help");
  return out;
}

}  // namespace volt::cli
