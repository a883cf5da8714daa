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
// A buffer of at least `bytes` for memory whose size changes from call to call (a plan's arena:
// each new input shape asks for another size). Served from a kept buffer up to twice as large,
// or else a fresh one rounded up to a power of two, so that a run at a larger shape than before
// mostly reuses pages that earlier runs faulted in; untouched pages of the rounding cost address
// space only. `*capacity` is what the buffer holds: pass it to pool_free.
void* pool_allocate_roomy(size_t bytes, size_t* capacity);
// Gives back a buffer from pool_allocate of the same `bytes`.
void pool_free(void* p, size_t bytes) noexcept;

}  // namespace volt
