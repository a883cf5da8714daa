// Fuzz target: the tensor readers. The first byte picks the format: a serialized TensorProto
// or a .npy file. Any volt::Error is a fine answer.
#include <cstdint>
#include <string>

#include "fuzz_input.hpp"
#include "loaders/loader.hpp"
#include "loaders/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volt::fuzz::ByteReader in(data, size);
  const bool npy = in.byte() & 1;
  const std::string bytes = in.rest();
  try {
    volt::Tensor t =
        npy ? volt::parse_npy(bytes, "fuzz.npy") : volt::tensor_from_pb_bytes(bytes, "fuzz.pb");
    // Touch every byte so a wrong size shows up under ASan.
    if (t.dtype() != volt::DType::String && t.nbytes()) {
      const auto* p = static_cast<const uint8_t*>(t.raw());
      volatile uint8_t sum = 0;
      for (size_t i = 0; i < t.nbytes(); ++i) sum = static_cast<uint8_t>(sum + p[i]);
    }
  } catch (const volt::Error&) {
  }
  return 0;
}
