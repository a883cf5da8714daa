// The volt subcommands. Each returns the process exit code; errors are volt::Error.
#pragma once

namespace volt::cli {
int cmd_info(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_test_onnx(int argc, char** argv);
int cmd_train(int argc, char** argv);
}  // namespace volt::cli
