// Large tensor buffers, kept for reuse. glibc serves big allocations with fresh mmaps and
// returns them on free, so a tensor of a few hundred KiB allocated every run (graph outputs,
// gradients, run-time shapes) page-faults every page every run; in virtual machines a fault
// costs tens of microseconds. The pool keeps freed buffers by size class, up to a cap, and hands
// them out again. Under AddressSanitizer it is off, so use-after-free stays detectable.
#pragma once
#include <cstddef>

namespace volt {

// A 64-byte aligned buffer of at least `bytes`; nullptr when memory is exhausted.
void* pool_allocate(size_t bytes);
// Gives back a buffer from pool_allocate of the same `bytes`.
void pool_free(void* p, size_t bytes) noexcept;

}  // namespace volt
