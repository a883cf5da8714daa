// volt — command line: info, run, bench, train, test-onnx; `volt help COMMAND` for each.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tools/commands.hpp"
#include "volt/volt.hpp"

namespace {

using volt::cli::Command;

void print_overview(std::FILE* to) {
  std::fprintf(to, "volt %s — a runtime for ONNX models\n\nusage: volt COMMAND [options]\n\n",
               volt::version());
  std::fprintf(to, "commands:\n");
  for (const Command& c : volt::cli::commands()) {
    const std::string head = c.name + " " + c.operands;
    std::fprintf(to, "  %-22s %s\n", head.c_str(), c.summary.c_str());
  }
  std::fprintf(to,
               "\n  volt help COMMAND, or volt COMMAND --help: that command's options\n"
               "  volt --version: the version\n");
}

std::vector<std::string> command_names() {
  std::vector<std::string> names;
  for (const Command& c : volt::cli::commands()) names.push_back(c.name);
  return names;
}

int unknown_command(const std::string& name) {
  std::fprintf(stderr, "volt: unknown command '%s'%s (volt --help lists them)\n", name.c_str(),
               volt::cli::suggestion(name, command_names()).c_str());
  return 2;
}

bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_overview(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || (cmd == "help" && argc == 2)) {
    print_overview(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "-V") {
    std::printf("volt %s\n", volt::version());
    return 0;
  }
  if (cmd == "help") {
    const Command* c = volt::cli::find_command(argv[2]);
    if (!c) return unknown_command(argv[2]);
    std::fputs(volt::cli::usage_of(*c).c_str(), stdout);
    return 0;
  }
  const Command* c = volt::cli::find_command(cmd);
  if (!c) return unknown_command(cmd);
  if (asks_for_help(argc, argv)) {
    std::fputs(volt::cli::usage_of(*c).c_str(), stdout);
    return 0;
  }
  try {
    const volt::cli::Args args = volt::cli::parse_args(argc, argv, 2, *c);
    // "MODEL": exactly one operand; "DIR...": one or more.
    const bool many = c->operands.ends_with("...");
    if (many ? args.positional.empty() : args.positional.size() != 1)
      throw volt::Error(volt::ErrorCode::InvalidArgument,
                        "expected " + c->operands + ", got " +
                            std::to_string(args.positional.size()) + " operands (volt " + cmd +
                            " --help)");
    return c->run(args);
  } catch (const std::exception& e) {
    // Under mpirun, say which rank failed.
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = std::getenv("PMIX_RANK");
    if (rank)
      std::fprintf(stderr, "volt %s (rank %s): error: %s\n", cmd.c_str(), rank, e.what());
    else
      std::fprintf(stderr, "volt %s: error: %s\n", cmd.c_str(), e.what());
    return 2;
  }
}
