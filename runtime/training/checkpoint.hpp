// Checkpoint files: named tensors plus the step and learning rate, with a checksum, written to
// a temporary file, synced and renamed into place, so a crash never leaves a half-written file
// at the target path.
#pragma once
#include <map>
#include <string>

#include "volt/volt.hpp"

namespace volt {

struct Checkpoint {
  int64_t step = 0;
  double learning_rate = 0;
  std::string optimizer;
  std::map<std::string, Tensor> tensors;  // "param/W", "state/m/W", "buffer/bn.running_mean", ...
};

void write_checkpoint(const std::string& path, const Checkpoint& c);
Checkpoint read_checkpoint(const std::string& path);  // Io or InvalidArgument on a bad file
// The two halves of read_checkpoint (a distributed trainer reads on rank 0 and decodes on all).
std::string read_checkpoint_bytes(const std::string& path);
Checkpoint decode_checkpoint(const std::string& file_bytes, const std::string& path);

}  // namespace volt
