// A model's big weights read in place: the serialized ModelProto with the raw_data of its main
// graph's large initializers cut out (so that protobuf parses a message of kilobytes, not one
// that allocates every weight as a string and copies it there), and where each of those bytes
// lies. The loader then copies each weight once, from the file's pages into its own aligned
// buffer (loaders/model_loader.cpp). Parsed, every weight cost two fresh copies: the string
// protobuf read it into and the tensor, each in pages the kernel zeroes first (DLRM, 207 MB:
// 63% of the load in that zeroing and copying, `perf record`).
//
// Only the wire format's lengths are rewritten: ModelProto.graph (field 7), its initializers
// (GraphProto field 5) and their raw_data (TensorProto field 9), which the format allows to
// repeat (protobuf merges a repeated message field and keeps the last of a repeated scalar one;
// the cut follows the same rules). Anything else is copied as it is; anything the walker does not
// expect (a group, a truncated field, lengths past the end) leaves the message as it was, for
// protobuf to parse or refuse.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace volt {

struct CutBytes {
  size_t initializer;   // its index among the main graph's initializers, in order
  size_t offset, size;  // of its raw_data in the original message
};

struct CutInitializers {
  std::string message;         // the ModelProto without those bytes
  std::vector<CutBytes> cuts;  // by initializer index, ascending
};

// Where the loader finds the cut bytes: `base` is the message they were cut from.
struct CutSource {
  const char* base = nullptr;
  std::vector<CutBytes> cuts;
  bool file_pages = false;  // base maps the model's file: pages are let go once copied
};

// raw_data fields of at least this many bytes are cut.
constexpr size_t kMinCutBytes = 64 * 1024;

// The message without its large initializers' raw_data; false (and `out` unspecified) where
// there is nothing to cut or the walker met something it does not expect.
bool cut_initializer_bytes(const char* data, size_t size, CutInitializers& out);

}  // namespace volt
