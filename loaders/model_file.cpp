#include "loaders/model_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <filesystem>

#include "runtime/error.hpp"

namespace volt {

ModelFileBytes parse_model_file(const std::string& path, onnx::ModelProto& proto) {
  std::error_code ec;
  VOLT_CHECK(std::filesystem::is_regular_file(path, ec), Io, path + ": no such model file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VOLT_CHECK(fd >= 0, Io, path + ": cannot open");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  VOLT_CHECK(::fstat(fd, &st) == 0, Io, path + ": cannot read its size");
  const auto size = static_cast<uint64_t>(st.st_size);
  VOLT_CHECK(size > 0, InvalidModel, path + ": empty file, not an ONNX model");
  VOLT_CHECK(size < (uint64_t{1} << 31), InvalidModel,
             path + ": " + std::to_string(size) +
                 " bytes is over protobuf's 2 GiB limit; store weights as external data");
  const std::string malformed =
      path + ": not a valid ONNX model (the protobuf message is malformed or truncated)";
  ModelFileBytes kept;
  if (size >= kMinCutBytes) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      kept.mapping = std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, size); });
      // Every page is read (the walker reads the fields' heads, the loader copies the weights):
      // read ahead now where the file is not cached. (Not MADV_SEQUENTIAL, which lets the page
      // cache drop the pages soon after, and the next load read them from disk again.)
      ::madvise(p, size, MADV_WILLNEED);
      CutInitializers cut;
      if (cut_initializer_bytes(static_cast<const char*>(p), size, cut)) {
        VOLT_CHECK(proto.ParseFromString(cut.message), InvalidModel, malformed);
        kept.cut = {static_cast<const char*>(p), std::move(cut.cuts), true};
        return kept;
      }
      kept.mapping.reset();
    }
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  google::protobuf::io::FileInputStream in(fd, 1 << 20);
  VOLT_CHECK(proto.ParseFromZeroCopyStream(&in) && in.GetErrno() == 0, InvalidModel, malformed);
  return kept;
}

void let_go_of_file_pages(std::string_view bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t from = (start + page - 1) / page * page,
                  to = (start + bytes.size()) / page * page;
  if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);  // a hint
}

}  // namespace volt
