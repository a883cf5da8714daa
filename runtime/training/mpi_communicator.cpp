// The Communicator on MPI. Waits poll (MPI_Test) and, between polls, read the control channel
// on which ranks announce that they leave: a close message (communicator id, collectives it
// issued there) when a trainer is freed and at exit. A rank waiting for collective m on a
// communicator that a peer closed after fewer than m ends the job; that is what keeps an early
// return on one rank from hanging the others. At exit (when volt initialized MPI) every rank
// announces, then meets the others at a barrier of its own before MPI_Finalize: Open MPI's
// finalize waits for every rank, and would hang beside a rank stuck in a collective.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "runtime/error.hpp"
#include "runtime/training/communicator.hpp"

namespace volt {
namespace {

constexpr int kCloseTag = 7301;
// Larger arrays go to MPI in pieces: its counts are ints.
constexpr size_t kMaxChunk = size_t{1} << 30;

// MPI itself, for the whole process: made once, never destroyed (the exit handler uses it).
class MpiProcess {
 public:
  static MpiProcess& get() {
    static MpiProcess* p = new MpiProcess();
    return *p;
  }

  // Every MPI call is made holding this: MPI is initialized for one call at a time
  // (MPI_THREAD_SERIALIZED), and trainers on several threads may talk at once.
  std::mutex mutex;
  int world_rank = 0, world_size = 1;

  // A new communicator for a trainer: its id (the same on every rank, as trainers are created in
  // the same order) and its MPI handle.
  std::pair<int, MPI_Comm> open() {
    std::lock_guard<std::mutex> lock(mutex);
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    const int id = next_id_++;
    open_[id] = 0;
    return {id, c};
  }

  // Trainers' communicators open in this process now.
  size_t open_count() {
    std::lock_guard<std::mutex> lock(mutex);
    return open_.size();
  }

  void count_issued(int id) {
    std::lock_guard<std::mutex> lock(mutex);
    ++open_[id];
  }

  // Tells every other rank that this one will issue no more collectives on `id`.
  void close(int id) {
    std::lock_guard<std::mutex> lock(mutex);
    close_locked(id);
  }

  // Reads the close messages that arrived; then the first peer that closed `id` after fewer
  // than `needed` collectives, or -1. The count it closed at goes to `*closed_at`.
  int peer_gone(int id, int64_t needed, int64_t* closed_at) {
    std::lock_guard<std::mutex> lock(mutex);
    drain_locked();
    for (const auto& [key, count] : closed_)
      if (key.second == id && count < needed) {
        *closed_at = count;
        return key.first;
      }
    return -1;
  }

  [[noreturn]] void abort(const std::string& reason) {
    std::fprintf(stderr, "volt: rank %d: %s; ending the job\n", world_rank, reason.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // (MPI_Abort does not return)
  }

 private:
  MpiProcess() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      VOLT_CHECK(provided >= MPI_THREAD_SERIALIZED, Runtime,
                 "MPI does not support calls from several threads one at a time "
                 "(MPI_THREAD_SERIALIZED)");
      owns_mpi_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    MPI_Comm_dup(MPI_COMM_WORLD, &exit_);
    if (owns_mpi_) std::atexit([] { get().finalize(); });
  }

  void close_locked(int id) {
    auto it = open_.find(id);
    if (it == open_.end()) return;
    const int64_t issued = it->second;
    open_.erase(it);
    for (int r = 0; r < world_size; ++r) {
      if (r == world_rank) continue;
      // A deque keeps each payload in place while its send may still read it.
      sent_.push_back({id, issued});
      MPI_Request req;
      MPI_Isend(sent_.back().data(), 2, MPI_INT64_T, r, kCloseTag, control_, &req);
      sends_.push_back(req);
    }
  }

  void drain_locked() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kCloseTag, control_, &flag, &st);
      if (!flag) return;
      int64_t msg[2];
      MPI_Recv(msg, 2, MPI_INT64_T, st.MPI_SOURCE, kCloseTag, control_, MPI_STATUS_IGNORE);
      closed_[{st.MPI_SOURCE, static_cast<int>(msg[0])}] = msg[1];
    }
  }

  // At exit: announce, meet the others, finalize.
  void finalize() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!open_.empty()) close_locked(open_.begin()->first);
    MPI_Request barrier;
    MPI_Ibarrier(exit_, &barrier);
    for (;;) {
      int done = 0;
      MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
      drain_locked();
      if (done) break;
      lock.unlock();
      lock.lock();
    }
    if (!sends_.empty())
      MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
    drain_locked();
    MPI_Finalize();
  }

  bool owns_mpi_ = false;
  MPI_Comm control_ = MPI_COMM_NULL, exit_ = MPI_COMM_NULL;
  int next_id_ = 0;
  std::map<int, int64_t> open_;                    // id -> collectives issued
  std::map<std::pair<int, int>, int64_t> closed_;  // (rank, id) -> collectives it issued
  std::deque<std::array<int64_t, 2>> sent_;
  std::vector<MPI_Request> sends_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() : process_(MpiProcess::get()) {
    std::tie(id_, comm_) = process_.open();
    rank_ = process_.world_rank;
    size_ = process_.world_size;
    // A blocking collective holds the process's MPI mutex until the other ranks join it: two
    // communicators that both did could wait for each other across threads and ranks. So only
    // one opened while no other trainer's was open on any rank blocks (decided by all ranks
    // alike: blocking and non-blocking forms of one collective do not match in MPI).
    int64_t others = process_.open_count() > 1 ? 1 : 0;
    max(&others, 1);
    may_block_ = others == 0;
  }
  ~MpiCommunicator() override {
    try {
      wait_started();
    } catch (...) {
    }
    process_.close(id_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void sum(float* data, size_t n) override { reduce(data, n, MPI_FLOAT, MPI_SUM, sizeof(float)); }
  void sum(double* data, size_t n) override {
    reduce(data, n, MPI_DOUBLE, MPI_SUM, sizeof(double));
  }
  void max(int64_t* data, size_t n) override {
    reduce(data, n, MPI_INT64_T, MPI_MAX, sizeof(int64_t));
  }

  void start_sum(float* data, size_t n) override {
    for (size_t off = 0; off < n; off += kMaxChunk) {
      const int count = static_cast<int>(std::min(kMaxChunk, n - off));
      MPI_Request req;
      issue("MPI_Iallreduce", [&] {
        return MPI_Iallreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, comm_, &req);
      });
      started_.push_back({req, issued_});
      payload_bytes_ += static_cast<uint64_t>(count) * sizeof(float);
    }
  }

  void progress() override {
    if (started_.empty()) return;
    std::lock_guard<std::mutex> lock(process_.mutex);
    for (auto& s : started_) {
      int done = 0;
      MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
    }
  }

  void wait_started() override {
    for (auto& s : started_) wait(s.request, s.index, "a gradient all-reduce");
    started_.clear();
  }

  using Communicator::gather_all;
  void gather_all(const void* mine, size_t bytes, Gathered& out) override {
    std::vector<int64_t> sizes(static_cast<size_t>(size_));
    int64_t my_size = static_cast<int64_t>(bytes);
    collective(
        "MPI_Allgather",
        [&] {
          return MPI_Allgather(&my_size, 1, MPI_INT64_T, sizes.data(), 1, MPI_INT64_T, comm_);
        },
        [&](MPI_Request* r) {
          return MPI_Iallgather(&my_size, 1, MPI_INT64_T, sizes.data(), 1, MPI_INT64_T, comm_, r);
        });
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    VOLT_CHECK(total <= INT_MAX, Runtime,
               "a gather across ranks of " + std::to_string(total) +
                   " bytes is past MPI's 2 GiB count limit");
    std::vector<int> counts(sizes.begin(), sizes.end()), offsets(counts.size(), 0);
    for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
    if (out.data.size() < static_cast<size_t>(total) + 1)
      out.data.resize(static_cast<size_t>(total) + 1);
    collective(
        "MPI_Allgatherv",
        [&] {
          return MPI_Allgatherv(mine, static_cast<int>(bytes), MPI_BYTE, out.data.data(),
                                counts.data(), offsets.data(), MPI_BYTE, comm_);
        },
        [&](MPI_Request* r) {
          return MPI_Iallgatherv(mine, static_cast<int>(bytes), MPI_BYTE, out.data.data(),
                                 counts.data(), offsets.data(), MPI_BYTE, comm_, r);
        });
    payload_bytes_ += bytes + sizeof my_size;
    out.offset.assign(offsets.begin(), offsets.end());
    out.size.assign(counts.begin(), counts.end());
  }

  void broadcast(std::string& bytes, int root) override {
    int64_t n = static_cast<int64_t>(bytes.size());
    broadcast(&n, sizeof n, root);
    bytes.resize(static_cast<size_t>(n));
    broadcast(bytes.data(), bytes.size(), root);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    char* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kMaxChunk) {
      const int count = static_cast<int>(std::min(kMaxChunk, bytes - off));
      collective(
          "MPI_Bcast", [&] { return MPI_Bcast(p + off, count, MPI_BYTE, root, comm_); },
          [&](MPI_Request* r) { return MPI_Ibcast(p + off, count, MPI_BYTE, root, comm_, r); });
    }
    payload_bytes_ += bytes;
  }

  [[noreturn]] void abort(const std::string& reason) override { process_.abort(reason); }

 private:
  struct Started {
    MPI_Request request;
    int64_t index;  // which collective on this communicator, 1-based
  };

  template <class F>
  void issue(const char* what, F&& f) {
    int rc;
    {
      std::lock_guard<std::mutex> lock(process_.mutex);
      rc = f();
    }
    ++issued_;
    process_.count_issued(id_);
    if (rc != MPI_SUCCESS) fail_mpi(what, rc);
  }

  // One collective that returns complete: `blocking` while committed (if this communicator may
  // block), else `start` and a polling wait.
  template <class Blocking, class Start>
  void collective(const char* what, Blocking&& blocking, Start&& start) {
    if (committed_ && may_block_) {
      issue(what, blocking);
      return;
    }
    MPI_Request req;
    issue(what, [&] { return start(&req); });
    wait(req, issued_, what);
  }

  void reduce(void* data, size_t n, MPI_Datatype type, MPI_Op op, size_t elem) {
    char* p = static_cast<char*>(data);
    for (size_t off = 0; off < n; off += kMaxChunk) {
      const int count = static_cast<int>(std::min(kMaxChunk, n - off));
      collective(
          "MPI_Allreduce",
          [&] { return MPI_Allreduce(MPI_IN_PLACE, p + off * elem, count, type, op, comm_); },
          [&](MPI_Request* r) {
            return MPI_Iallreduce(MPI_IN_PLACE, p + off * elem, count, type, op, comm_, r);
          });
      payload_bytes_ += static_cast<uint64_t>(count) * elem;
    }
  }

  // Polls until `req` completes; a peer that closed this communicator before collective `index`
  // will never join it: the job ends.
  void wait(MPI_Request& req, int64_t index, const char* what) {
    for (;;) {
      int done = 0, rc;
      {
        std::lock_guard<std::mutex> lock(process_.mutex);
        rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      }
      if (rc != MPI_SUCCESS) fail_mpi(what, rc);
      if (done) return;
      int64_t closed_at = 0;
      const int gone = process_.peer_gone(id_, index, &closed_at);
      if (gone >= 0)
        abort("rank " + std::to_string(gone) + " left the job (its program returned or freed " +
              "its trainer) after " + std::to_string(closed_at) +
              " collective operations of this trainer, while this rank waits for it in " + what +
              " (operation " + std::to_string(index) + ")");
    }
  }

  // A collective failed: the ranks can no longer agree on anything.
  [[noreturn]] void fail_mpi(const char* what, int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    abort(std::string(what) + " failed: " + text);
  }

  MpiProcess& process_;
  int id_ = 0, rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t issued_ = 0;
  bool may_block_ = false;
  std::vector<Started> started_;
};

}  // namespace

std::unique_ptr<Communicator> open_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace volt
