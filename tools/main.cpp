// volt — command line: run, bench, train, info, test-onnx.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/commands.hpp"
#include "volt/volt.hpp"

namespace {
void usage() {
  std::fprintf(
      stderr,
      "volt %s — ONNX runtime\n"
      "usage:\n"
      "  volt info MODEL\n"
      "  volt run MODEL [--input NAME=FILE.npy|random]... [--shape NAME=D1xD2...]... "
      "[--output-dir DIR] [--threads T]\n"
      "                   [--timeout-ms MS] [--memory-limit BYTES] [--winograd on|off] "
      "[--device cpu|cuda:N]\n"
      "  volt bench MODEL [--batch N] [--input NAME=FILE.npy]... [--shape NAME=D1xD2...]... "
      "[--range NAME=LO:HI]...\n"
      "                   [--threads T]"
      " [--warmup W] [--iterations N | --seconds S] [--json] [--profile FILE]\n"
      "                   [--precision fp32|bf16|fp16|int8] [--calibrate NAME=FILE.npy] [--timeout-ms MS] [--memory-limit BYTES] "
      "[--winograd on|off]\n"
      "                   [--device cpu|cuda:N]\n"
      "  volt train MODEL --input NAME=FILE.npy... --label FILE.npy [--loss "
      "cross_entropy|mse|model_output]\n"
      "                   [--optimizer sgd|adam|adamw] [--learning-rate LR] [--batch N] "
      "[--epochs E]\n"
      "                   [--validation-split F] [--checkpoint FILE] [--export OUT.onnx] "
      "[--option KEY=VALUE]...\n"
      "                   [--device cpu|cuda:N] [--precision fp32|mixed_fp16]\n"
      "  volt test-onnx DIR... [--expect FILE] [--verbose] [--device cpu|cuda:N]\n",
      volt::version());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "info") return volt::cli::cmd_info(argc, argv);
    if (cmd == "run") return volt::cli::cmd_run(argc, argv);
    if (cmd == "bench") return volt::cli::cmd_bench(argc, argv);
    if (cmd == "test-onnx") return volt::cli::cmd_test_onnx(argc, argv);
    if (cmd == "train") return volt::cli::cmd_train(argc, argv);
    if (cmd == "--version") {
      std::printf("volt %s\n", volt::version());
      return 0;
    }
    std::fprintf(stderr, "volt: unknown command '%s'\n", cmd.c_str());
    usage();
    return 2;
  } catch (const volt::Error& e) {
    std::fprintf(stderr, "volt %s: error: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "volt %s: error: %s\n", cmd.c_str(), e.what());
    return 2;
  }
}
