#include "runtime/training/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/error.hpp"

namespace volt {
namespace {

constexpr char kMagic[8] = {'V', 'O', 'L', 'T', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;

// FNV-1a over the whole body: detects truncation and corruption.
uint64_t checksum(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out += s;
}

class Reader {
 public:
  Reader(const std::string& data, const std::string& path) : d_(data), path_(path) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, d_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s = d_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  const char* take(size_t n) {
    need(n);
    const char* p = d_.data() + pos_;
    pos_ += n;
    return p;
  }
  bool done() const { return pos_ == d_.size(); }

 private:
  void need(size_t n) const {
    VOLT_CHECK(pos_ + n <= d_.size() && pos_ + n >= pos_, InvalidArgument,
               path_ + ": checkpoint is truncated");
  }
  const std::string& d_;
  std::string path_;
  size_t pos_ = 0;
};

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    VOLT_CHECK(n > 0, Io, path + ": write failed: " + std::strerror(errno));
    off += static_cast<size_t>(n);
  }
}

// Temporaries that a killed process left beside `path` ("PATH.tmp.PID.N" with PID gone).
void remove_stale_temporaries(const std::string& path) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      std::filesystem::remove(e.path(), ec);
  }
}

}  // namespace

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  std::string body;
  put<uint32_t>(body, kVersion);
  put<int64_t>(body, c.step);
  put<double>(body, c.learning_rate);
  put_string(body, c.optimizer);
  put<uint64_t>(body, c.tensors.size());
  for (const auto& [name, t] : c.tensors) {
    VOLT_CHECK(t.dtype() != DType::String, InvalidArgument,
               "checkpoint tensor '" + name + "' holds strings");
    put_string(body, name);
    put<int32_t>(body, static_cast<int32_t>(t.dtype()));
    put<uint32_t>(body, static_cast<uint32_t>(t.rank()));
    for (int64_t d : t.shape()) put<int64_t>(body, d);
    put<uint64_t>(body, t.nbytes());
    body.append(static_cast<const char*>(t.raw()), t.nbytes());
  }
  std::string file(kMagic, sizeof kMagic);
  file += body;
  put<uint64_t>(file, checksum(body));

  // Temporary file in the same folder, synced, renamed over the target, folder synced.
  const std::filesystem::path target(path);
  remove_stale_temporaries(path);
  // Unique per process and per save, so concurrent saves to one path never share a file.
  static std::atomic<uint64_t> saves{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(saves.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  VOLT_CHECK(fd >= 0, Io, path + ": cannot create " + tmp + ": " + std::strerror(errno));
  try {
    write_all(fd, file, tmp);
    VOLT_CHECK(::fsync(fd) == 0, Io, tmp + ": fsync failed");
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail(ErrorCode::Io,
         path + ": cannot rename the checkpoint into place: " + std::strerror(errno));
  }
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

Checkpoint read_checkpoint(const std::string& path) {
  return decode_checkpoint(read_checkpoint_bytes(path), path);
}

std::string read_checkpoint_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in, Io, path + ": cannot open checkpoint");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Checkpoint decode_checkpoint(const std::string& file, const std::string& path) {
  VOLT_CHECK(
      file.size() >= sizeof kMagic + 8 && std::memcmp(file.data(), kMagic, sizeof kMagic) == 0,
      InvalidArgument, path + ": not a volt checkpoint");
  const std::string body = file.substr(sizeof kMagic, file.size() - sizeof kMagic - 8);
  uint64_t stored;
  std::memcpy(&stored, file.data() + file.size() - 8, 8);
  VOLT_CHECK(stored == checksum(body), InvalidArgument,
             path + ": checkpoint is corrupt (checksum mismatch)");
  Reader r(body, path);
  VOLT_CHECK(r.get<uint32_t>() == kVersion, InvalidArgument,
             path + ": unsupported checkpoint version");
  Checkpoint c;
  c.step = r.get<int64_t>();
  c.learning_rate = r.get<double>();
  c.optimizer = r.get_string();
  const uint64_t count = r.get<uint64_t>();
  for (uint64_t i = 0; i < count; ++i) {
    const std::string name = r.get_string();
    const int32_t dt = r.get<int32_t>();
    VOLT_CHECK(dtype_is_valid(dt) && dt != static_cast<int32_t>(DType::String), InvalidArgument,
               path + ": bad dtype for '" + name + "'");
    const uint32_t rank = r.get<uint32_t>();
    VOLT_CHECK(rank <= 64, InvalidArgument, path + ": bad rank for '" + name + "'");
    Shape shape(rank);
    for (auto& d : shape) d = r.get<int64_t>();
    const uint64_t nbytes = r.get<uint64_t>();
    const int64_t numel = numel_of(shape);
    VOLT_CHECK(nbytes == static_cast<uint64_t>(numel) * dtype_size(static_cast<DType>(dt)),
               InvalidArgument, path + ": size mismatch for '" + name + "'");
    c.tensors[name] = Tensor::copy_of(static_cast<DType>(dt), shape, r.take(nbytes));
  }
  VOLT_CHECK(r.done(), InvalidArgument, path + ": trailing bytes in checkpoint");
  return c;
}

}  // namespace volt
