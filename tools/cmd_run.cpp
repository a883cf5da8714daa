// volt run MODEL [--input NAME=FILE.npy|random]... [--output-dir DIR]: runs once, prints each
// output's shape and summary, and writes outputs as .npy files.
#include <cstdio>
#include <filesystem>

#include "loaders/npy.hpp"
#include "tools/cli_util.hpp"
#include "tools/commands.hpp"

namespace volt::cli {

int cmd_run(const Args& args) {
  const SessionOptions opts = session_options_from(args);
  const RunOptions run_options = run_options_from(args);
  Session session(args.positional[0], opts);
  const NamedValues feeds = feeds_from(args, session, 1, 42);

  const std::vector<Value> outs = session.run(feeds, {}, run_options);
  const std::string dir = args.get("output-dir");
  if (!dir.empty()) std::filesystem::create_directories(dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& name = session.outputs()[i].name;
    std::printf("%s: %s\n", name.c_str(), summarize(outs[i]).c_str());
    if (!dir.empty() && outs[i].is_tensor())
      write_npy((std::filesystem::path(dir) / (safe_file_name(name) + ".npy")).string(),
                outs[i].tensor());
  }
  return 0;
}

}  // namespace volt::cli
