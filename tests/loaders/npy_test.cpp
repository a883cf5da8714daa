#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "loaders/npy.hpp"
#include "model_builder.hpp"

namespace volt {
namespace {

TEST(Npy, RoundTripsEveryNumericDtype) {
  const std::string p =
      (std::filesystem::temp_directory_path() / ("volt_npy_" + std::to_string(getpid()) + ".npy"))
          .string();
  for (DType t : {DType::Float, DType::Double, DType::Int64, DType::Int32, DType::Int8,
                  DType::UInt8, DType::Bool, DType::Float16}) {
    Tensor x = Tensor::empty(t, {2, 3});
    for (size_t i = 0; i < x.nbytes(); ++i)
      static_cast<uint8_t*>(x.raw())[i] = static_cast<uint8_t>(t == DType::Bool ? i % 2 : i * 7);
    write_npy(p, x);
    for (const Tensor& y : {read_npy(p), map_npy(p)}) {
      EXPECT_EQ(y.dtype(), t);
      EXPECT_EQ(y.shape(), x.shape());
      EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << dtype_name(t);
    }
  }
  {
    // A mapped tensor is a private copy: writing to it leaves the file as it was.
    Tensor x = Tensor::from<float>({1, 2, 3}, {3});
    write_npy(p, x);
    Tensor m = map_npy(p);
    m.data<float>()[0] = 9;
    EXPECT_EQ(read_npy(p).data<float>()[0], 1.0f);
  }
  Tensor scalar = Tensor::scalar(2.5f);
  write_npy(p, scalar);
  EXPECT_EQ(read_npy(p).shape(), Shape{});
  std::filesystem::remove(p);
}

TEST(Npy, BadFilesAreErrors) {
  EXPECT_VOLT_ERROR(parse_npy("hello", "h.npy"), InvalidArgument, "h.npy", "not a .npy");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) +
                      std::string(1, static_cast<char>(header.size())) + std::string(1, '\0') +
                      header;
  EXPECT_VOLT_ERROR(parse_npy(bytes + std::string(8, '\0'), "short.npy"), InvalidArgument,
                    "short.npy", "[2,3]");
  std::string obj = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }";
  EXPECT_VOLT_ERROR(
      parse_npy(std::string("\x93NUMPY\x01\x00", 8) +
                    std::string(1, static_cast<char>(obj.size())) + std::string(1, '\0') + obj,
                "o.npy"),
      NotImplemented, "|O");
  const std::string bad =
      (std::filesystem::temp_directory_path() / ("volt_bad_" + std::to_string(getpid()) + ".npy"))
          .string();
  { std::ofstream(bad) << "hello, not numpy"; }
  EXPECT_VOLT_ERROR(map_npy(bad), InvalidArgument, "not a .npy");
  { std::ofstream truncate(bad); }
  EXPECT_THROW(map_npy(bad), Error);  // empty
  EXPECT_VOLT_ERROR(map_npy(bad + ".missing"), Io, "cannot open");
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace volt
