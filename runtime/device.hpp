// Accelerator support seen from the runtime: a backend per device kind (CUDA) that allocates,
// copies and hands out streams. The core library knows only this interface; operators/cuda/
// registers the CUDA backend when it is built, and tests may install a stand-in.
#pragma once
#include <cstddef>
#include <string>

#include "volt/volt.hpp"

namespace volt {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Devices of this kind the machine has; 0 with `why_unavailable()` saying why.
  virtual int device_count() const = 0;
  virtual std::string why_unavailable() const = 0;
  // Device memory of at least `bytes` (256-byte aligned), ordered on `stream` (nullptr: the
  // default stream): usable by work queued there after this call; freed the same way, after the
  // work queued on `stream` before the free. Throws ErrorCode::OutOfMemory.
  virtual void* allocate(int index, size_t bytes, void* stream) = 0;
  virtual void deallocate(int index, void* p, size_t bytes, void* stream) noexcept = 0;
  // Copies on `stream` (nullptr: the device's default stream) and waits for them: the caller may
  // reuse the host buffer when this returns.
  virtual void copy_to_device(int index, void* dst, const void* src, size_t bytes,
                              void* stream) = 0;
  virtual void copy_to_host(int index, void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual void copy_on_device(int index, void* dst, const void* src, size_t bytes,
                              void* stream) = 0;
  // A stream for one run, and its return once everything queued on it has finished.
  virtual void* acquire_stream(int index) = 0;
  virtual void release_stream(int index, void* stream) noexcept = 0;
  virtual void synchronize(int index, void* stream) = 0;
};

// The backend for a device kind; nullptr when this build has none.
DeviceBackend* device_backend(Device::Kind kind);
// Installs a backend (the CUDA library at load time; tests). Returns the one it replaced.
DeviceBackend* set_device_backend(Device::Kind kind, DeviceBackend* backend);

// The backend of `device`, checked: the build has it and the machine has that device. The
// errors are ErrorCode::Device and say which of the two is missing.
DeviceBackend& require_device(const Device& device);

// Registry name of a device's kernels: "cpu", "cuda".
const char* device_kind_name(Device::Kind kind);

}  // namespace volt
