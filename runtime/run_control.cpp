#include "runtime/run_control.hpp"

#include <unistd.h>

#include <string>

#include "runtime/error.hpp"

namespace volt {
namespace {
thread_local const RunControl* t_current = nullptr;

std::string mib(size_t bytes) {
  if (bytes < (size_t{1} << 20)) return std::to_string(bytes) + " bytes";
  return std::to_string(bytes >> 20) + " MiB";
}
}  // namespace

void MemoryBudget::reserve(size_t bytes, const char* what) {
  size_t used = used_.load(std::memory_order_relaxed);
  for (;;) {
    if (bytes > limit_ || used > limit_ - bytes)
      fail(ErrorCode::OutOfMemory,
           std::string(what) + " of " + std::to_string(bytes) + " bytes would pass the run's " +
               "memory limit of " + mib(limit_) + " (" + mib(used) +
               " already in use; raise SessionOptions::memory_limit / option memory_limit)");
    if (used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed)) break;
  }
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (used + bytes > peak &&
         !peak_.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
  }
}

RunControl::RunControl(const RunOptions& options, size_t memory_limit)
    : profile_(options.profile),
      start_(std::chrono::steady_clock::now()),
      cancel_(options.cancel),
      has_deadline_(options.timeout_ms > 0),
      timeout_ms_(options.timeout_ms),
      budget_(
          std::make_shared<MemoryBudget>(memory_limit ? memory_limit : physical_memory_bytes())) {
  VOLT_CHECK(options.timeout_ms >= 0, InvalidArgument,
             "timeout_ms must be >= 0, got " + std::to_string(options.timeout_ms));
  if (has_deadline_)
    deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
}

void RunControl::check() const {
  if (cancel_ && cancel_->cancelled()) fail(ErrorCode::Cancelled, "the run was cancelled");
  if (has_deadline_ && std::chrono::steady_clock::now() > deadline_)
    fail(ErrorCode::Timeout,
         "the run passed its deadline of " + std::to_string(timeout_ms_) + " ms");
}

const RunControl* current_run_control() {
  return t_current;
}

std::shared_ptr<MemoryBudget> reserve_in_current_run(size_t bytes, const char* what) {
  if (!t_current) return nullptr;
  t_current->budget()->reserve(bytes, what);
  return t_current->budget();
}

ScopedRunControl::ScopedRunControl(const RunControl* control) : previous_(t_current) {
  if (!t_current) t_current = control;
}
ScopedRunControl::~ScopedRunControl() {
  t_current = previous_;
}

RunControlSuspended::RunControlSuspended() : previous_(t_current) {
  t_current = nullptr;
}
RunControlSuspended::~RunControlSuspended() {
  t_current = previous_;
}

size_t physical_memory_bytes() {
  // Once: sysconf(_SC_PHYS_PAGES) is a sysinfo() system call, and every run asks.
  static const size_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return SIZE_MAX;
    return static_cast<size_t>(pages) * static_cast<size_t>(page);
  }();
  return bytes;
}

}  // namespace volt
