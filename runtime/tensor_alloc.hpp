// Internal tensor allocation: like Tensor::empty, with the choice not to zero-fill.
#pragma once
#include "volt/volt.hpp"

namespace volt {
// A fresh 64-byte aligned tensor; zero-filled when `zero`, uninitialized otherwise.
Tensor allocate_tensor(DType dtype, Shape shape, bool zero = false);
// An uninitialized tensor of numbers for the life of a session (a model's weights): its memory
// goes back to the system when it is freed, never to the pool of per-run buffers, so that a
// weight the planner drops once a kernel holds its packed copy does not stay resident.
Tensor allocate_lasting_tensor(DType dtype, Shape shape);
// An uninitialized tensor on an accelerator, its memory ordered on `stream` (see DeviceBackend).
Tensor allocate_on_device(Device device, DType dtype, Shape shape, void* stream);
// numel * the element size, or ErrorCode::OutOfMemory where that cannot be a real allocation.
size_t checked_bytes(DType dtype, int64_t numel);
}  // namespace volt
