#include "runtime/device.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <mutex>

#include "runtime/error.hpp"

namespace volt {
namespace {
std::array<std::atomic<DeviceBackend*>, 2> g_backends{};
std::string g_plugin_error;  // why libvolt_cuda.so did not load, when it did not

// The CUDA backend is a plugin beside this library (libvolt_cuda.so), loaded on first demand so
// that CPU-only use never loads the CUDA libraries. Its static initializers register its
// kernels and install the backend.
void load_cuda_plugin_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info self{};
    if (!dladdr(reinterpret_cast<void*>(&load_cuda_plugin_once), &self) || !self.dli_fname) return;
    std::string dir = self.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    const std::string path = dir + "libvolt_cuda.so";
    if (access(path.c_str(), F_OK) != 0) return;  // a build without the CUDA backend
    if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      const char* e = dlerror();
      g_plugin_error = e ? e : "dlopen failed";
    }
  });
}
}  // namespace

const char* device_kind_name(Device::Kind kind) {
  return kind == Device::Kind::Cuda ? "cuda" : "cpu";
}

std::string Device::str() const {
  return is_cpu() ? "cpu" : std::string(device_kind_name(kind)) + ":" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return {};
  const std::string cuda = "cuda";
  if (text.rfind(cuda, 0) == 0) {
    if (text.size() == cuda.size()) return {Kind::Cuda, 0};
    const std::string rest = text.substr(cuda.size() + 1);
    const bool digits = text[cuda.size()] == ':' && !rest.empty() && rest.size() <= 4 &&
                        rest.find_first_not_of("0123456789") == std::string::npos;
    if (digits) return {Kind::Cuda, std::stoi(rest)};
  }
  fail(ErrorCode::Device, "device '" + text + "' is not cpu, cuda or cuda:N");
}

DeviceBackend* device_backend(Device::Kind kind) {
  DeviceBackend* b = g_backends[static_cast<size_t>(kind)].load();
  if (!b && kind == Device::Kind::Cuda) {
    load_cuda_plugin_once();
    b = g_backends[static_cast<size_t>(kind)].load();
  }
  return b;
}

DeviceBackend* set_device_backend(Device::Kind kind, DeviceBackend* backend) {
  return g_backends[static_cast<size_t>(kind)].exchange(backend);
}

DeviceBackend& require_device(const Device& device) {
  DeviceBackend* b = device_backend(device.kind);
  VOLT_CHECK(b, Device,
             "device '" + device.str() + "': " +
                 (g_plugin_error.empty()
                      ? std::string("this build of volt has no ") + device_kind_name(device.kind) +
                            " backend (configure with -DVOLT_CUDA=ON)"
                      : "the CUDA backend did not load: " + g_plugin_error));
  const int count = b->device_count();
  VOLT_CHECK(device.index >= 0 && device.index < count, Device,
             "device '" + device.str() + "' is not available: " +
                 (count == 0 ? b->why_unavailable()
                             : "this machine has " + std::to_string(count) + " such device(s)"));
  return *b;
}

int device_count(Device::Kind kind) {
  if (kind == Device::Kind::Cpu) return 1;
  try {
    const DeviceBackend* b = device_backend(kind);
    return b ? b->device_count() : 0;
  } catch (const std::exception&) {
    return 0;  // a backend that cannot even count its devices has none to offer
  }
}

}  // namespace volt
