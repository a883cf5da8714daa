// Large tensor buffers, kept for reuse. glibc serves big allocations with fresh mmaps and
// returns them on free, so a tensor of a few hundred KiB allocated every run (graph outputs,
// gradients, run-time shapes) page-faults every page every run; in virtual machines a fault
// costs tens of microseconds. The pool keeps freed buffers by size class, up to a cap, and hands
// them out again. Under AddressSanitizer it is off, so use-after-free stays detectable.
#pragma once
#include <cstddef>

namespace volt {

// A 64-byte aligned buffer of at least `bytes` (nullptr when memory is exhausted); `*capacity`
// is what it holds: pass that to pool_free. Sizes change from call to call (graph outputs and
// values shaped at run time, at each new input shape), so a request takes a kept buffer up to twice
// as large, or else a fresh one rounded up to a power of two: a run at a larger shape than before
// then mostly reuses pages that earlier runs faulted in. A fresh buffer's pages under 4 MiB, the
// rounding's too, are faulted in at once (one call): GPT-2's step, whose present keys and values
// are graph outputs, otherwise faulted the pages past the last request at each longer past (64
// faults and 150-180 us of its Concat's first run at each new past, in a C++ process); a kept
// buffer's pages are resident whether it is reused or waits in the pool.
void* pool_allocate(size_t bytes, size_t* capacity);
// Gives back a buffer from pool_allocate, with the capacity it gave.
void pool_free(void* p, size_t bytes) noexcept;
// `bytes` rounded up to the pool's size classes: quarters of a power of two (at most 25% more),
// and at least 64.
size_t size_class_bytes(size_t bytes);

// A run's arena of at least `bytes` (page-aligned; nullptr when memory is exhausted), with
// `*capacity` to pass to arena_free. Arenas are regions of reserved address space, kept with
// their pages between runs and grown in place, quadrupling (at most 8 MiB past the request), when a
// run needs more: at growing input shapes (a decoder's past, longer sentences) runs fault only
// pages no earlier run touched, and at a few shapes rather than a little at each. Small arenas
// come from pool_allocate.
void* arena_allocate(size_t bytes, size_t* capacity);
void arena_free(void* p, size_t capacity) noexcept;

// A 64-byte aligned buffer the pool never keeps: for data that lives as long as a session (a
// model's weights, their packed copies). Freed (with the bytes asked for), its memory goes back to
// the system, except while a RecycleLastingBuffers scope is open anywhere.
void* lasting_allocate(size_t bytes);
void lasting_free(void* p, size_t bytes) noexcept;

// While one lives, freed lasting buffers are held for lasting_allocate to take (the smallest
// that fits, trimmed to the request) instead of given back; when the last one ends, the ones left
// are given back. Planning opens one: the weights it drops for their packed copies become the
// next weights' packed copies (BERT in bf16: half of each dropped buffer), with no fresh pages
// to fault, and nothing outlives the plan.
class RecycleLastingBuffers {
 public:
  RecycleLastingBuffers();
  ~RecycleLastingBuffers();
  RecycleLastingBuffers(const RecycleLastingBuffers&) = delete;
  RecycleLastingBuffers& operator=(const RecycleLastingBuffers&) = delete;
};

// Has glibc's malloc keep 16 MiB above the top of each heap when it gives freed memory back
// (M_TOP_PAD), once per process. By default it keeps 128 KiB, so the buffers oneDNN allocates
// per call (its gemm's packing buffers on each OpenMP worker, for products with run-time
// dimensions; what primitive creation allocates) are faulted in again at each larger input
// shape: a text classifier's first run at a new length took 256 page faults (about 1.2 us each
// here), 62-79 with this. (Setting the pad also fixes glibc's mmap threshold at 128 KiB: blocks
// above it stay mappings of their own, given back when freed. Keeping those in the heaps too, a
// 32 MiB threshold, raised BERT's peak resident size from 524 to 778 MiB: a model's parse frees
// large blocks that the heaps then held while the packed weights were made.) Left as it is where
// the process set glibc's malloc tunables (MALLOC_*_ variables, GLIBC_TUNABLES) or
// VOLT_SYSTEM_MALLOC, and under AddressSanitizer. Session creation calls it before it loads the
// model: called after, it left the faults as they were. (In a Python process the pad does not
// reach the run's allocations: Python's own objects sit above them in the heap, and a text
// classifier's first runs there fault as before, 160-180 pages.)
void keep_freed_memory();

// Faults in `bytes` (at most 8 MiB) at the top of the calling thread's heap and frees them, where
// keep_freed_memory's pad keeps freed memory: the plans a session builds for new input shapes
// (each kept in its cache) then take resident pages. Each plan otherwise faulted its own in:
// 12-15 faults of the text classifier's 45-85 us plans (1.2-1.7 us each here). Called after a
// session's first plan for a second input shape, with room for the next few dozen like it
// (what runs at new shapes allocate besides takes its share), so that sessions fed one shape pay
// nothing.
void warm_heap_for_plans(size_t bytes);
// What glibc's malloc holds allocated now, in all its arenas (mallinfo2): a plan's footprint is
// the difference across its build.
size_t heap_bytes_in_use();

}  // namespace volt
