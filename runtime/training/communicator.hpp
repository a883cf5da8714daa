// How the ranks of a data-parallel training job talk to each other: collectives over MPI (Open
// MPI from Debian), one communicator per trainer on a duplicate of MPI_COMM_WORLD, so that the
// trainer's collectives never match a user's own.
//
// Every rank issues the same collectives in the same order. The waits poll instead of
// blocking: a rank that leaves the job (its program returns, or it frees its trainer) tells the
// others, and a rank waiting for a collective that the leaver never joined ends the job
// (MPI_Abort) with a message naming it, instead of hanging. A rank killed outright ends the job
// through mpirun. Collectives that every rank has agreed to issue (a committed section) need not
// watch for leavers, and block instead.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace volt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place, element-wise, across ranks.
  virtual void sum(float* data, size_t n) = 0;
  virtual void sum(double* data, size_t n) = 0;
  virtual void max(int64_t* data, size_t n) = 0;
  // A sum that runs while the caller goes on: started ones complete in wait_started(), and make
  // progress whenever progress() (or any other call) is made.
  virtual void start_sum(float* data, size_t n) = 0;
  virtual void progress() = 0;
  virtual void wait_started() = 0;
  // Every rank's bytes, in rank order (sizes may differ), in one buffer. `into` may be reused
  // from step to step: its buffer only grows, so a steady exchange allocates nothing.
  struct Gathered {
    std::vector<char> data;
    std::vector<size_t> offset, size;
    const char* of(size_t rank) const { return data.data() + offset[rank]; }
    std::string str(size_t rank) const { return std::string(of(rank), size[rank]); }
  };
  virtual void gather_all(const void* mine, size_t bytes, Gathered& into) = 0;
  Gathered gather_all(const void* mine, size_t bytes) {
    Gathered g;
    gather_all(mine, bytes, g);
    return g;
  }
  // `root`'s bytes on every rank (the size too).
  virtual void broadcast(std::string& bytes, int root) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Ends every rank of the job, after printing "volt: rank R: <reason>".
  [[noreturn]] virtual void abort(const std::string& reason) = 0;

  // Bytes this rank has handed to collectives (its payload; what the transport adds is not
  // counted).
  uint64_t payload_bytes() const { return payload_bytes_; }

  // Once every rank has agreed to run a step, a rank can miss one of that step's collectives
  // only by dying (mpirun ends the job) or by failing, which the caller must turn into abort().
  // While committed, the collectives other than start_sum() need not poll for ranks that left:
  // they run MPI's blocking algorithms, which Open MPI 4.1 makes 1.3-2.5x faster on one
  // machine than its non-blocking ones (libnbc). A scope, so that it cannot be left on.
  class Committed {
   public:
    explicit Committed(Communicator& c) : c_(c) { c_.committed_ = true; }
    ~Committed() { c_.committed_ = false; }
    Committed(const Committed&) = delete;
    Committed& operator=(const Committed&) = delete;

   private:
    Communicator& c_;
  };

 protected:
  uint64_t payload_bytes_ = 0;
  bool committed_ = false;
};

// Whether this process was started by mpirun or another PMI launcher.
bool launched_by_mpi_launcher();

// The communicator the `distributed` training option asks for (auto | off | mpi), or nullptr
// for a single process. MPI is initialized on first use (unless the program did it) and
// finalized at exit.
std::unique_ptr<Communicator> open_communicator(const std::string& distributed);

}  // namespace volt
