// Gradients summed over the micro-batches of an optimizer step (accumulate_steps) and across the
// ranks of a distributed job, the same way in both cases, so that two ranks with half a batch
// each compute bit for bit what one process computes accumulating the two halves in rank order.
#pragma once
#include <string>
#include <vector>

#include "runtime/training/communicator.hpp"
#include "volt/volt.hpp"

namespace volt {

// Dense gradients in flat fp32 buckets (fp64 ones in buckets of their own). Filled as the
// backward pass produces each gradient; on the micro-batch that exchanges, each bucket is summed
// across ranks (one non-blocking all-reduce) as soon as all of its gradients are in, so the
// exchange runs while the rest of the backward pass does; the last one, with nothing left to
// overlap, by a completing all-reduce in finish(). Buckets are summed in index order on every
// rank, as MPI requires of collectives.
class DenseGradientBuckets {
 public:
  struct Slot {
    DType dtype;  // the gradient's (16-bit ones are summed in fp32)
    Shape shape;
  };
  // `slots` in the order the backward pass produces them: bucket k holds a run of them.
  DenseGradientBuckets(std::vector<Slot> slots, size_t bucket_bytes);

  // A micro-batch begins: the first of an optimizer step overwrites the sums, the others add to
  // them; `exchange` (or nullptr) sums them across ranks as they complete.
  void begin(bool first, Communicator* exchange);
  // Slot i's gradient of this micro-batch.
  void add(size_t i, const Tensor& gradient);
  // After the backward pass: every slot must have been added; exchanges what is left, waits.
  void finish();
  // Slot i's sum times `scale` (scaled in place: call it once per slot and step), in the slot's
  // dtype: for fp32 and fp64 a view of the bucket, valid until the next begin().
  Tensor gradient(size_t i, double scale);
  size_t size() const { return slots_.size(); }

 private:
  struct Bucket {
    bool fp64 = false;
    std::vector<float> f;
    std::vector<double> d;
    size_t members = 0, added = 0;
    bool started = false;
  };
  void start_ready();

  std::vector<Slot> slots_;
  std::vector<size_t> bucket_of_, offset_;
  std::vector<Bucket> buckets_;
  std::vector<char> added_;
  size_t next_start_ = 0;
  bool first_ = true;
  Communicator* exchange_ = nullptr;
};

// The sum of row-sparse gradients of one table, added in the order given; rows the union's,
// ascending. The values must be fp32 or fp64.
RowSparseTensor sum_rows(const std::vector<RowSparseTensor>& parts);

// `tables[t]` (each rank's gradient of table t, rows merged) becomes the sum over ranks, added
// in rank order, identical on every rank. The row ids travel first (one all-gather for all
// tables); a table whose union of rows covers more than `dense_fraction` of it is then summed by
// one dense all-reduce over the whole table, the others by an all-gather of their rows' values.
// What exchange_rows keeps from one step to the next, so that it does not allocate.
struct RowExchangeBuffers {
  Communicator::Gathered ids, values;
  std::vector<int64_t> my_ids;
  std::vector<char> my_values;
};
void exchange_rows(Communicator& comm, std::vector<RowSparseTensor>& tables, double dense_fraction,
                   RowExchangeBuffers& buffers);

// values *= scale, in place (the caller owns the values).
void scale_rows_in_place(RowSparseTensor& g, double scale);

}  // namespace volt
