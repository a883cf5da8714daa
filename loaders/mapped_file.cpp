#include "loaders/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/error.hpp"

namespace volt {

MappedFile::MappedFile(const std::string& path) {
  std::error_code ec;
  VOLT_CHECK(std::filesystem::is_regular_file(path, ec), Io, path + ": no such model file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VOLT_CHECK(fd_ >= 0, Io, path + ": cannot open");
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    release();
    fail(ErrorCode::Io, path + ": cannot read its size");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (p == MAP_FAILED) {
    release();
    fail(ErrorCode::Io, path + ": cannot map it");
  }
  data_ = p;
  ::madvise(data_, size_, MADV_SEQUENTIAL);
}

void MappedFile::release() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace volt
