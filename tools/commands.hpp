// The volt subcommands and their options: one table that parsing, `--help` and the
// unknown-option suggestions all read. Each command returns the process exit code; errors are
// volt::Error.
#pragma once
#include <string>
#include <vector>

#include "tools/cli_util.hpp"

namespace volt::cli {

struct Option {
  std::string name;   // without the leading "--"
  std::string value;  // placeholder ("N", "FILE"); empty for a switch, which takes none
  std::string help;   // one line
};

struct Command {
  std::string name;      // "bench"
  std::string operands;  // "MODEL"
  std::string summary;   // one line
  std::vector<Option> options;
  int (*run)(const Args& args);
};

const std::vector<Command>& commands();
const Command* find_command(const std::string& name);
// "usage: volt bench MODEL [options]", the summary and one line per option.
std::string usage_of(const Command& command);

int cmd_info(const Args& args);
int cmd_run(const Args& args);
int cmd_bench(const Args& args);
int cmd_test_onnx(const Args& args);
int cmd_train(const Args& args);

}  // namespace volt::cli
