// The CUDA device backend: stream-ordered caching allocation (CUDA's memory pools, kept instead
// of returned to the driver), copies, one stream per run from a pool, and the per-thread cuBLAS
// and cuDNN handles the kernels share. Installed when libvolt_cuda.so is loaded.
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "operators/cuda/cuda_context.hpp"
#include "runtime/device.hpp"

namespace volt::cuda {
namespace {

class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    VOLT_CUDA_CALL(cudaGetDevice(&previous_));
    if (previous_ != index) VOLT_CUDA_CALL(cudaSetDevice(index));
    index_ = index;
  }
  ~DeviceScope() {
    if (previous_ != index_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0, index_ = 0;
};

class CudaBackend final : public DeviceBackend {
 public:
  int device_count() const override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }
  std::string why_unavailable() const override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    if (e != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return n == 0 ? "the CUDA driver sees no device" : "";
  }

  void* allocate(int index, size_t bytes, void* stream) override {
    DeviceScope scope(index);
    keep_pool_cached(index);
    void* p = nullptr;
    cudaError_t e = cudaMallocAsync(&p, bytes, static_cast<cudaStream_t>(stream));
    if (e == cudaErrorMemoryAllocation) {
      // What the pool holds for reuse goes back to the driver, then one more try.
      (void)cudaGetLastError();
      VOLT_CUDA_CALL(cudaDeviceSynchronize());
      cudaMemPool_t pool;
      VOLT_CUDA_CALL(cudaDeviceGetDefaultMemPool(&pool, index));
      VOLT_CUDA_CALL(cudaMemPoolTrimTo(pool, 0));
      e = cudaMallocAsync(&p, bytes, static_cast<cudaStream_t>(stream));
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      fail(ErrorCode::OutOfMemory, "out of memory on cuda:" + std::to_string(index) +
                                       " allocating " + std::to_string(bytes) + " bytes");
    }
    check(e, "cudaMallocAsync");
    return p;
  }
  void deallocate(int index, void* p, size_t, void* stream) noexcept override {
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    if (previous != index) (void)cudaSetDevice(index);
    (void)cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
    if (previous != index) (void)cudaSetDevice(previous);
  }

  void copy_to_device(int index, void* dst, const void* src, size_t bytes, void* stream) override {
    copy(index, dst, src, bytes, cudaMemcpyHostToDevice, stream);
  }
  void copy_to_host(int index, void* dst, const void* src, size_t bytes, void* stream) override {
    copy(index, dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  }
  void copy_on_device(int index, void* dst, const void* src, size_t bytes, void* stream) override {
    copy(index, dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
  }

  void* acquire_stream(int index) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free = free_streams_[index];
      if (!free.empty()) {
        cudaStream_t s = free.back();
        free.pop_back();
        return s;
      }
    }
    DeviceScope scope(index);
    cudaStream_t s = nullptr;
    VOLT_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  void release_stream(int index, void* stream) noexcept override {
    // Work still queued (a run that failed midway) finishes before another run gets the stream.
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    (void)cudaGetLastError();
    std::lock_guard<std::mutex> lock(mutex_);
    free_streams_[index].push_back(static_cast<cudaStream_t>(stream));
  }
  void synchronize(int index, void* stream) override {
    DeviceScope scope(index);
    VOLT_CUDA_CALL(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }

 private:
  void copy(int index, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
            void* stream) {
    DeviceScope scope(index);
    const auto s = static_cast<cudaStream_t>(stream);
    // A copy that names no stream (Tensor::to, clone, a value moved for a host kernel) cannot
    // know which stream wrote its source, and runs use non-blocking streams that the legacy
    // default stream does not wait for: everything queued on the device finishes first.
    if (!s) VOLT_CUDA_CALL(cudaDeviceSynchronize());
    VOLT_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, kind, s));
    VOLT_CUDA_CALL(cudaStreamSynchronize(s));
  }
  // The default pool returns freed memory to the driver at each synchronization unless told to
  // keep it: with the threshold at its maximum it is the caching arena that runs reuse.
  void keep_pool_cached(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pools_configured_.count(index)) return;
    cudaMemPool_t pool;
    VOLT_CUDA_CALL(cudaDeviceGetDefaultMemPool(&pool, index));
    uint64_t threshold = UINT64_MAX;
    VOLT_CUDA_CALL(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    pools_configured_.insert({index, true});
  }

  std::mutex mutex_;
  std::map<int, std::vector<cudaStream_t>> free_streams_;
  std::map<int, bool> pools_configured_;
};

CudaBackend g_backend;

// Installed when the library is loaded, removed when it is unloaded.
struct Install {
  Install() { set_device_backend(Device::Kind::Cuda, &g_backend); }
  ~Install() { set_device_backend(Device::Kind::Cuda, nullptr); }
} g_install;

}  // namespace

Handles& handles(int device) {
  thread_local std::map<int, Handles> per_device;
  Handles& h = per_device[device];
  if (!h.blas) {
    DeviceScope scope(device);
    VOLT_CUDA_CALL(cublasCreate(&h.blas));
    VOLT_CUDA_CALL(cudnnCreate(&h.dnn));
    VOLT_CUDA_CALL(cusparseCreate(&h.sparse));
  }
  return h;
}

}  // namespace volt::cuda
