// What bounds one run: its deadline, its cancel token and its memory budget. The executor
// installs it for the thread that runs the graph; subgraph runs of If/Loop/Scan happen on that
// thread and so see the same one, and tensors allocated there count against its budget.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>

#include "volt/volt.hpp"

namespace volt {

// Bytes a run holds, against its limit. Shared with the deleters of the tensors it allocated,
// so it outlives the run while its outputs are alive.
class MemoryBudget {
 public:
  explicit MemoryBudget(size_t limit) : limit_(limit) {}
  // Takes `bytes` from the budget, or throws ErrorCode::OutOfMemory (naming `what`) without
  // taking anything.
  void reserve(size_t bytes, const char* what);
  void release(size_t bytes) noexcept { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  size_t limit() const { return limit_; }
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  size_t limit_;
  std::atomic<size_t> used_{0};
  std::atomic<size_t> peak_{0};
};

class RunControl {
 public:
  RunControl(const RunOptions& options, size_t memory_limit);
  // Throws ErrorCode::Cancelled or ErrorCode::Timeout when the run must stop.
  void check() const;
  const std::shared_ptr<MemoryBudget>& budget() const { return budget_; }
  // Where node timings go, or nullptr; microseconds since the run began.
  RunProfile* profile() const { return profile_; }
  double elapsed_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  RunProfile* profile_;
  std::chrono::steady_clock::time_point start_;
  const CancelToken* cancel_;
  bool has_deadline_;
  std::chrono::steady_clock::time_point deadline_;
  int64_t timeout_ms_;
  std::shared_ptr<MemoryBudget> budget_;
};

// The control of the run on this thread, or nullptr outside runs.
const RunControl* current_run_control();

// Reserves `bytes` against the budget of this thread's run (throwing OutOfMemory past it) and
// returns that budget, to release them to later; nullptr outside runs (nothing reserved).
std::shared_ptr<MemoryBudget> reserve_in_current_run(size_t bytes, const char* what);

// Installs a control for this thread's run unless one already is (a nested subgraph run keeps
// its parent's).
class ScopedRunControl {
 public:
  explicit ScopedRunControl(const RunControl* control);
  ~ScopedRunControl();
  ScopedRunControl(const ScopedRunControl&) = delete;
  ScopedRunControl& operator=(const ScopedRunControl&) = delete;

 private:
  const RunControl* previous_;
};

// Building a plan is not part of any one run: what it allocates (reordered weights, folded
// constants) lives with the plan, so it is not counted against the run that happened to build it.
class RunControlSuspended {
 public:
  RunControlSuspended();
  ~RunControlSuspended();
  RunControlSuspended(const RunControlSuspended&) = delete;
  RunControlSuspended& operator=(const RunControlSuspended&) = delete;

 private:
  const RunControl* previous_;
};

// Between nodes and loop iterations: stops the run if it was cancelled or is past its deadline.
inline void check_run_interrupted() {
  if (const RunControl* c = current_run_control()) c->check();
}

// The machine's physical memory in bytes: the default memory limit.
size_t physical_memory_bytes();

}  // namespace volt
