#include "geotrain/io/safetensors.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "geotrain/common/errors.hpp"
#include "geotrain/common/model_shape.hpp"

namespace geotrain::io {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian, read in place");

using nlohmann::json;

// The limit of the reference implementation: a larger header is a damaged
// or foreign file, refused before allocating for it.
constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

int dtype_width(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;  // not readable here (I64, F64, U8, ...)
}

std::uint64_t non_negative(const json& value, const std::string& field) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0) {
    throw InputError(field + ": must be a non-negative integer, got " + value.dump());
  }
  return value.get<std::uint64_t>();
}

// One header entry, checked against the data area's size.
SafetensorsEntry parse_entry(const std::string& name, const json& value, std::uint64_t data_bytes,
                             const std::string& field) {
  if (!value.is_object()) throw InputError(field + ": must be an object with dtype, shape, data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) throw InputError(field + ": " + key + ": missing");
  }
  SafetensorsEntry e;
  e.name = name;
  if (!value["dtype"].is_string()) throw InputError(field + ": dtype: must be a string");
  e.dtype = value["dtype"].get<std::string>();
  const json& shape = value["shape"];
  const json& offsets = value["data_offsets"];
  if (!shape.is_array() || shape.size() > 8) throw InputError(field + ": shape: must be a list of at most 8 sizes");
  for (const json& d : shape) e.shape.push_back(static_cast<std::int64_t>(non_negative(d, field + ": shape")));
  if (!offsets.is_array() || offsets.size() != 2) throw InputError(field + ": data_offsets: must be [begin, end]");
  e.begin = non_negative(offsets[0], field + ": data_offsets");
  e.end = non_negative(offsets[1], field + ": data_offsets");
  if (e.begin > e.end || e.end > data_bytes) {
    throw InputError(field + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     "] outside the " + std::to_string(data_bytes) + " data bytes (truncated file?)");
  }
  if (const int width = dtype_width(e.dtype); width > 0) {
    // Factor by factor, so that the product cannot wrap around.
    std::uint64_t bytes = static_cast<std::uint64_t>(width);
    for (std::int64_t d : e.shape) {
      if (d != 0 && bytes > data_bytes / static_cast<std::uint64_t>(d)) bytes = data_bytes + 1;
      else bytes *= static_cast<std::uint64_t>(d);
    }
    if (bytes != e.end - e.begin) {
      throw InputError(field + ": shape " + dims_text(e.shape) + " in " + e.dtype + " needs " +
                       std::to_string(bytes) + " bytes, data_offsets span " + std::to_string(e.end - e.begin));
    }
  }
  return e;
}

void read_metadata(const json& value, const std::string& path, std::map<std::string, std::string>& out) {
  if (!value.is_object()) throw InputError(path + ": __metadata__: must be an object of strings");
  for (const auto& [key, text] : value.items()) {
    if (!text.is_string()) throw InputError(path + ": __metadata__: " + key + ": must be a string");
    out[key] = text.get<std::string>();
  }
}

}  // namespace

std::uint64_t SafetensorsEntry::element_count() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  std::error_code error;
  const std::uint64_t size = std::filesystem::file_size(path, error);
  if (error) throw InputError(path + ": cannot open file (" + error.message() + ")");
  in_.open(path, std::ios::binary);
  if (!in_) throw InputError(path + ": cannot open file");
  unsigned char length_bytes[8] = {};
  if (size < 8 || !in_.read(reinterpret_cast<char*>(length_bytes), 8)) {
    throw InputError(path + ": header length: file shorter than 8 bytes (not a safetensors file)");
  }
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > size - 8) {
    throw InputError(path + ": header length: " + std::to_string(header_bytes) + " bytes, but the file has " +
                     std::to_string(size) + " (not a safetensors file, or truncated)");
  }
  std::string text(header_bytes, '\0');
  if (!in_.read(text.data(), static_cast<std::streamsize>(header_bytes))) throw InputError(path + ": header: cannot read");
  json header;
  try {
    header = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(path + ": header: not valid JSON at byte " + std::to_string(e.byte) + " (not a safetensors file?)");
  } catch (const json::exception&) {  // e.g. a number beyond any range
    throw InputError(path + ": header: not valid JSON (a number out of range; not a safetensors file?)");
  }
  if (!header.is_object()) throw InputError(path + ": header: must be a JSON object");
  data_start_ = 8 + header_bytes;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      read_metadata(value, path, metadata_);
      continue;
    }
    entries_.push_back(parse_entry(name, value, size - data_start_, path + ": tensor '" + name + "'"));
  }
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  for (const SafetensorsEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<float> SafetensorsReader::read_floats(const SafetensorsEntry& e) {
  const int width = dtype_width(e.dtype);
  if (width == 0) {
    throw InputError(path_ + ": tensor '" + e.name + "': dtype " + e.dtype +
                     " is not supported (F32, F16 or BF16 are)");
  }
  std::vector<unsigned char> bytes(e.end - e.begin);
  if (bytes.empty()) return {};  // a zero-sized tensor: nothing to read (and no buffer to copy from)
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(data_start_ + e.begin));
  if (!in_.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()))) {
    throw InputError(path_ + ": tensor '" + e.name + "': cannot read its bytes (truncated file?)");
  }
  std::vector<float> values(bytes.size() / width);
  if (width == 4) {
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto bits = static_cast<std::uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
    values[i] = e.dtype == "F16" ? half_to_float(bits) : bfloat16_to_float(bits);
  }
  return values;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    const std::uint64_t bytes = t.values.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  // Padded with spaces to 8 bytes, as the reference writer does, so that
  // the data starts aligned for readers that map the file.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const SafetensorsTensor& t : tensors) {
    if (t.values.empty()) continue;
    out.write(reinterpret_cast<const char*>(t.values.data()), static_cast<std::streamsize>(t.values.size() * sizeof(float)));
  }
  out.close();
  if (!out) throw RunError(path + ": cannot write");
}

float half_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits >> 15) << 31;
  const std::uint32_t exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

float bfloat16_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

}  // namespace geotrain::io
