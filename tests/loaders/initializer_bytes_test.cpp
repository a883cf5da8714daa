// The main graph's large raw_data initializers are cut from the message before protobuf parses
// it and copied by the loader from the file or buffer (loaders/initializer_bytes.cpp): the cut
// message parses to the same model less those bytes, and the cuts point at exactly them, also
// where the wire format repeats a field (two graph fields, whose initializers protobuf merges in
// order; two raw_data fields in one tensor, of which protobuf keeps the last); sessions from a
// file and from memory compute with the weights as written; bad sizes and truncated files are
// refused as before.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "loaders/initializer_bytes.hpp"
#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

constexpr int64_t kLarge = 20000;  // floats: 80 000 bytes, above kMinCutBytes

std::string float_bytes(int64_t n, float start) {
  std::string s(static_cast<size_t>(n) * sizeof(float), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = start + static_cast<float>(i % 97);
    std::memcpy(s.data() + i * sizeof(float), &v, sizeof v);
  }
  return s;
}

// Field `number` of a message, length-delimited (wire type 2), holding `payload`.
std::string length_delimited(int number, const std::string& payload) {
  std::string field(1, static_cast<char>(number << 3 | 2));
  uint64_t n = payload.size();
  for (; n >= 0x80; n >>= 7) field.push_back(static_cast<char>((n & 0x7f) | 0x80));
  field.push_back(static_cast<char>(n));
  return field + payload;
}

onnx::TensorProto raw_tensor(const std::string& name, int64_t n, float start) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(n);
  t.set_raw_data(float_bytes(n, start));
  return t;
}

// y = x + W over kLarge floats, W in raw_data; also a small raw_data and a float_data weight.
ModelBuilder add_model() {
  ModelBuilder b;
  b.input("x", 1, {kLarge}).output("y", 1, {kLarge}).node("Add", {"x", "W"}, {"y"});
  b.initializer("F", {2}, {1.0f, 2.0f});
  *b.proto().mutable_graph()->add_initializer() = raw_tensor("small", 4, 3.0f);
  *b.proto().mutable_graph()->add_initializer() = raw_tensor("W", kLarge, 0.5f);
  return b;
}

TEST(CutInitializerBytes, TheCutMessageIsTheModelLessTheLargeBytes) {
  ModelBuilder b = add_model();
  const std::string bytes = b.bytes();
  CutInitializers cut;
  ASSERT_TRUE(cut_initializer_bytes(bytes.data(), bytes.size(), cut));
  ASSERT_EQ(cut.cuts.size(), 1u);
  EXPECT_EQ(cut.cuts[0].initializer, 2u);
  EXPECT_EQ(bytes.substr(cut.cuts[0].offset, cut.cuts[0].size), float_bytes(kLarge, 0.5f));
  EXPECT_LT(cut.message.size(), bytes.size() - kLarge * 4 + 64);
  onnx::ModelProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(cut.message));
  onnx::ModelProto want = b.proto();
  want.mutable_graph()->mutable_initializer(2)->clear_raw_data();
  EXPECT_EQ(parsed.SerializeAsString(), want.SerializeAsString());
}

TEST(CutInitializerBytes, NothingToCutOrAMalformedMessageIsLeftToProtobuf) {
  ModelBuilder small;
  small.input("x", 1, {4}).output("y", 1, {4}).node("Relu", {"x"}, {"y"});
  const std::string bytes = small.bytes();
  CutInitializers cut;
  EXPECT_FALSE(cut_initializer_bytes(bytes.data(), bytes.size(), cut));
  const std::string big = add_model().bytes();
  for (size_t keep : {big.size() - 1, big.size() / 2, size_t{3}})
    EXPECT_FALSE(cut_initializer_bytes(big.data(), keep, cut)) << keep;
  const std::string group = big + std::string("\x0b", 1);  // field 1 as a start-group
  EXPECT_FALSE(cut_initializer_bytes(group.data(), group.size(), cut));
}

// A second graph field appended to the message: protobuf merges its initializers after the
// first's. Its one tensor has two raw_data fields; the last is the tensor's.
TEST(CutInitializerBytes, RepeatedFieldsFollowProtobufsMerge) {
  const std::string base = add_model().bytes();
  for (bool large_last : {true, false}) {
    onnx::TensorProto first = raw_tensor("V", large_last ? 4 : kLarge, 7.0f);
    const std::string last = large_last ? float_bytes(kLarge, 9.0f) : float_bytes(4, 9.0f);
    // V [kLarge] (or [4]) with its raw_data given twice: first's, then `last`.
    first.clear_dims();
    first.add_dims(large_last ? kLarge : 4);
    std::string tensor = first.SerializeAsString();
    onnx::TensorProto only_raw;
    only_raw.set_raw_data(last);
    tensor += only_raw.SerializeAsString();
    // A GraphProto holding one initializer field of those bytes, in ModelProto field 7 (graph),
    // written by hand: a parse would keep only the last raw_data.
    const std::string bytes = base + length_delimited(7, length_delimited(5, tensor));
    onnx::ModelProto whole;
    ASSERT_TRUE(whole.ParseFromString(bytes));
    ASSERT_EQ(whole.graph().initializer_size(), 4);
    ASSERT_EQ(whole.graph().initializer(3).raw_data(), last);  // protobuf's rule

    CutInitializers cut;
    ASSERT_TRUE(cut_initializer_bytes(bytes.data(), bytes.size(), cut));
    ASSERT_EQ(cut.cuts.size(), large_last ? 2u : 1u);
    EXPECT_EQ(cut.cuts[0].initializer, 2u);
    onnx::ModelProto parsed;
    ASSERT_TRUE(parsed.ParseFromString(cut.message));
    ASSERT_EQ(parsed.graph().initializer_size(), 4);
    if (large_last) {
      EXPECT_EQ(cut.cuts[1].initializer, 3u);
      EXPECT_EQ(bytes.substr(cut.cuts[1].offset, cut.cuts[1].size), last);
      EXPECT_FALSE(parsed.graph().initializer(3).has_raw_data());
    } else {  // the large one is not the tensor's: nothing cut, the small one stays
      EXPECT_EQ(parsed.graph().initializer(3).raw_data(), last);
    }
  }
}

class InitializerBytesLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("volt_cut_" + std::to_string(getpid()) + ".onnx"))
                .string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void write(const std::string& bytes) const {
    std::ofstream out(path_, std::ios::binary);
    out << bytes;
  }
  std::string path_;
};

TEST_F(InitializerBytesLoad, SessionsFromAFileAndFromMemoryUseTheWeightsAsWritten) {
  const std::string bytes = add_model().bytes();
  write(bytes);
  std::vector<float> x(kLarge);
  for (int64_t i = 0; i < kLarge; ++i) x[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i);
  const Tensor in = Tensor::from(x, {kLarge});
  Session from_file(path_);
  Session from_memory = Session::from_bytes(bytes.data(), bytes.size());
  for (Session* s : {&from_file, &from_memory}) {
    const Tensor y = s->run({{"x", in}})[0].tensor();
    for (int64_t i = 0; i < kLarge; ++i)
      ASSERT_EQ(y.data<float>()[i], x[static_cast<size_t>(i)] + 0.5f + static_cast<float>(i % 97))
          << i;
  }
}

TEST_F(InitializerBytesLoad, AWrongSizeAndATruncatedFileAreRefused) {
  ModelBuilder b = add_model();
  b.proto().mutable_graph()->mutable_initializer(2)->set_raw_data(float_bytes(kLarge + 1, 0.0f));
  const std::string bad = b.bytes();
  write(bad);
  EXPECT_VOLT_ERROR(Session{path_}, InvalidModel, "initializer 'W' has 80004 bytes of data");
  EXPECT_VOLT_ERROR(Session::from_bytes(bad.data(), bad.size()), InvalidModel, "80004 bytes");
  const std::string good = add_model().bytes();
  for (size_t keep : {good.size() - 5, good.size() / 2}) {
    write(good.substr(0, keep));
    EXPECT_VOLT_ERROR(Session{path_}, InvalidModel, "malformed or truncated");
  }
}

}  // namespace
}  // namespace volt
