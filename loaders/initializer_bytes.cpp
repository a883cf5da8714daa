#include "loaders/initializer_bytes.hpp"

namespace volt {
namespace {

// Wire types (protobuf's encoding): varint, 64-bit, length-delimited, start/end group, 32-bit.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };
constexpr uint32_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;

// A cursor over [p, end) that fails (ok = false) instead of reading past the end.
struct Reader {
  const char* p;
  const char* end;
  bool ok = true;

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p == end) break;
      const auto byte = static_cast<uint8_t>(*p++);
      v |= uint64_t{byte & 0x7fu} << shift;
      if (!(byte & 0x80u)) return v;
    }
    ok = false;
    return 0;
  }
  // One field: its number and wire type, and where its payload (length-delimited) or the whole
  // field (any type) lies.
  struct Field {
    uint32_t number = 0, wire = 0;
    const char *start = nullptr, *payload = nullptr, *stop = nullptr;
  };
  bool next(Field& f) {
    f.start = p;
    const uint64_t tag = varint();
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (!ok || f.number == 0) return ok = false;
    switch (f.wire) {
      case kVarint:
        varint();
        break;
      case kFixed64:
        skip(8);
        break;
      case kFixed32:
        skip(4);
        break;
      case kLen: {
        const uint64_t n = varint();
        if (ok && n > static_cast<uint64_t>(end - p)) ok = false;
        f.payload = p;
        if (ok) p += n;
        break;
      }
      default:  // groups: not in ONNX's messages
        ok = false;
    }
    f.stop = p;
    return ok;
  }
  void skip(size_t n) {
    if (static_cast<size_t>(end - p) < n)
      ok = false;
    else
      p += n;
  }
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A length-delimited field `number` holding `payload`.
void put_message(std::string& out, uint32_t number, const std::string& payload) {
  put_varint(out, uint64_t{number} << 3 | kLen);
  put_varint(out, payload.size());
  out += payload;
}

// The TensorProto in [p, end) without its last raw_data when that one is large, in `out`, with
// that raw_data's offset and size in *cut; size 0 (and `out` untouched) when nothing is cut.
// False on a malformed field.
bool cut_tensor(const char* p, const char* end, const char* base, std::string& out, CutBytes* cut) {
  Reader r{p, end};
  Reader::Field f, last_raw;
  while (r.p != end)
    if (!r.next(f))
      return false;
    else if (f.number == kTensorRawData && f.wire == kLen)
      last_raw = f;
  cut->size = 0;
  const bool large =
      last_raw.start && static_cast<size_t>(last_raw.stop - last_raw.payload) >= kMinCutBytes;
  if (!large) return true;  // (the caller keeps the field as it is)
  // (Earlier raw_data fields go too: the last one is the tensor's, and it is cut.)
  Reader again{p, end};
  out.clear();
  while (again.p != end) {
    again.next(f);
    if (!(f.number == kTensorRawData && f.wire == kLen)) out.append(f.start, f.stop);
  }
  cut->offset = static_cast<size_t>(last_raw.payload - base);
  cut->size = static_cast<size_t>(last_raw.stop - last_raw.payload);
  return true;
}

bool cut_graph(const char* p, const char* end, const char* base, size_t& index, std::string& out,
               std::vector<CutBytes>& cuts) {
  Reader r{p, end};
  Reader::Field f;
  std::string tensor;
  while (r.p != end) {
    if (!r.next(f)) return false;
    if (f.number != kGraphInitializer || f.wire != kLen) {
      out.append(f.start, f.stop);
      continue;
    }
    CutBytes cut{index++, 0, 0};
    if (!cut_tensor(f.payload, f.stop, base, tensor, &cut)) return false;
    if (cut.size == 0) {
      out.append(f.start, f.stop);
      continue;
    }
    // (A later cut of the same index cannot happen: each initializer field is its own tensor.)
    cuts.push_back(cut);
    put_message(out, kGraphInitializer, tensor);
  }
  return true;
}

}  // namespace

bool cut_initializer_bytes(const char* data, size_t size, CutInitializers& out) {
  out.message.clear();
  out.cuts.clear();
  Reader r{data, data + size};
  Reader::Field f;
  size_t index = 0;  // initializers of every graph field: protobuf merges them in order
  std::string graph;
  while (r.p != r.end) {
    if (!r.next(f)) return false;
    if (f.number != kModelGraph || f.wire != kLen) {
      out.message.append(f.start, f.stop);
      continue;
    }
    graph.clear();
    if (!cut_graph(f.payload, f.stop, data, index, graph, out.cuts)) return false;
    put_message(out.message, kModelGraph, graph);
  }
  return !out.cuts.empty();
}

}  // namespace volt
