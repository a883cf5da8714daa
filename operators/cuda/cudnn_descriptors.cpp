// The key under which a convolution's measured algorithm is kept (cudnn_descriptors.hpp).
#include "operators/cuda/cudnn_descriptors.hpp"

namespace volt::cuda {
namespace {

void append(std::string& key, const int* v, int n) {
  for (int i = 0; i < n; ++i) key += std::to_string(v[i]) + ",";
  key += ";";
}

void append(std::string& key, cudnnTensorDescriptor_t t) {
  cudnnDataType_t type;
  int rank = 0, dims[8], strides[8];
  VOLT_CUDA_CALL(cudnnGetTensorNdDescriptor(t, 8, &type, &rank, dims, strides));
  key += std::to_string(static_cast<int>(type)) + ":";
  append(key, dims, rank);
  append(key, strides, rank);
}

}  // namespace

std::string convolution_key(const char* direction, cudnnTensorDescriptor_t a,
                            cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                            cudnnTensorDescriptor_t b) {
  std::string key = direction;
  key += "|";
  append(key, a);
  append(key, b);
  cudnnDataType_t type;
  cudnnTensorFormat_t format;
  int rank = 0, dims[8];
  VOLT_CUDA_CALL(cudnnGetFilterNdDescriptor(w, 8, &type, &format, &rank, dims));
  key +=
      std::to_string(static_cast<int>(type)) + ":" + std::to_string(static_cast<int>(format)) + ":";
  append(key, dims, rank);
  int spatial = 0, pads[6], strides[6], dilations[6], groups = 1;
  cudnnConvolutionMode_t mode;
  cudnnDataType_t compute;
  cudnnMathType_t math;
  VOLT_CUDA_CALL(
      cudnnGetConvolutionNdDescriptor(c, 6, &spatial, pads, strides, dilations, &mode, &compute));
  VOLT_CUDA_CALL(cudnnGetConvolutionGroupCount(c, &groups));
  VOLT_CUDA_CALL(cudnnGetConvolutionMathType(c, &math));
  append(key, pads, spatial);
  append(key, strides, spatial);
  append(key, dilations, spatial);
  key += std::to_string(static_cast<int>(mode)) + ":" + std::to_string(static_cast<int>(compute)) +
         ":" + std::to_string(groups) + ":" + std::to_string(static_cast<int>(math));
  return key;
}

}  // namespace volt::cuda
