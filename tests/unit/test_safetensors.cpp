// Safetensors reading and writing (io/safetensors.hpp) and the Hugging Face
// GPT-2 config.json checks (io/hf_gpt2.hpp). Expected values are worked by
// hand from the IEEE 754 half / bfloat16 bit layouts and the format's
// definition, not produced by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/hf_gpt2.hpp"
#include "geotrain/io/safetensors.hpp"
#include "support/scratch_dir.hpp"
#include "support/input_error.hpp"

namespace geotrain::io {
namespace {

using geotrain::testing::input_error_of;
std::string error_of(const std::function<void()>& f) { return input_error_of(f); }

// A file in `dir` of the 8-byte length, `header` and `data` bytes.
std::string write_raw(const std::filesystem::path& dir, const std::string& name, const std::string& header,
                      const std::string& data, std::uint64_t claimed_length = 0) {
  const std::string path = (dir / name).string();
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t length = claimed_length ? claimed_length : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length >> (8 * i)));
  out << header << data;
  return path;
}

TEST(Safetensors, HalfAndBfloat16WidenExactly) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);                 // largest half
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));    // smallest normal
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));    // smallest subnormal
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24)); // largest subnormal
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);          // 1/3 rounded: 1.0101010101b x 2^-2
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)) && half_to_float(0x8000) == 0.0f);
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_EQ(bfloat16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bfloat16_to_float(0x4049), 3.140625f);
  EXPECT_EQ(bfloat16_to_float(0xc0a0), -5.0f);
}

TEST(Safetensors, ReadsF32F16Bf16AndMetadata) {
  // F32 [2]: 1.5, -2; F16 [2]: 1, -2; BF16 [1]: 3.140625 (little-endian bytes).
  const std::string data = std::string("\x00\x00\xc0\x3f\x00\x00\x00\xc0", 8) + std::string("\x00\x3c\x00\xc0", 4) +
                           std::string("\x49\x40", 2);
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[1,2],"data_offsets":[8,12]},)"
      R"("c":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]},"__metadata__":{"format":"pt"}})";
  SafetensorsReader file(write_raw(geotrain::testing::scratch_dir("safetensors"), "good.safetensors", header, data));
  ASSERT_EQ(file.entries().size(), 3u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.read_floats(*file.find("a")), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(file.read_floats(*file.find("b")), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(file.find("b")->shape, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(file.read_floats(*file.find("c")), (std::vector<float>{3.140625f}));
}

TEST(Safetensors, WriteThenReadIsExactAndAligned) {
  const std::string path = (geotrain::testing::scratch_dir("safetensors") / "w.safetensors").string();
  write_safetensors(path, {{"x", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"y", {1}, {-0.0f}}}, {{"format", "pt"}});
  std::ifstream in(path, std::ios::binary);
  std::uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  EXPECT_EQ((8 + length) % 8, 0u) << "the data area starts 8-byte aligned";
  SafetensorsReader file(path);
  EXPECT_EQ(file.read_floats(*file.find("x")), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(file.find("x")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_TRUE(std::signbit(file.read_floats(*file.find("y"))[0]));
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

TEST(Safetensors, DamagedFilesAreRejectedNamingFileAndField) {
  const std::string entry = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  const std::filesystem::path dir = geotrain::testing::scratch_dir("safetensors");
  EXPECT_NE(error_of([&] { SafetensorsReader r((dir / "absent").string()); }).find("absent: cannot open"),
            std::string::npos);
  const std::string long_header = write_raw(dir, "long.safetensors", entry, eight, 1 << 20);
  EXPECT_NE(error_of([&] { SafetensorsReader r(long_header); }).find("long.safetensors: header length: 1048576 bytes"),
            std::string::npos);
  const std::string not_json = write_raw(dir, "json.safetensors", "{\"w\": [", eight);
  EXPECT_NE(error_of([&] { SafetensorsReader r(not_json); }).find("json.safetensors: header: not valid JSON"),
            std::string::npos);
  const std::string short_data = write_raw(dir, "short.safetensors", entry, std::string(6, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsReader r(short_data); })
                .find("short.safetensors: tensor 'w': data_offsets [0, 8] outside the 6 data bytes"),
            std::string::npos);
  const std::string mismatch =
      write_raw(dir, "span.safetensors", R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", eight);
  EXPECT_NE(error_of([&] { SafetensorsReader r(mismatch); }).find("tensor 'w': shape [3] in F16 needs 6 bytes"),
            std::string::npos);
  const std::string metadata =
      write_raw(dir, "meta.safetensors", R"({"__metadata__":{"format":1}})", "");
  EXPECT_NE(error_of([&] { SafetensorsReader r(metadata); }).find("__metadata__: format: must be a string"),
            std::string::npos);
  SafetensorsReader ints(write_raw(dir, "i64.safetensors", R"({"n":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", eight));
  EXPECT_NE(error_of([&] { ints.read_floats(ints.entries()[0]); }).find("tensor 'n': dtype I64 is not supported"),
            std::string::npos);
}

std::string config_file(const std::filesystem::path& dir, const std::string& name, const std::string& extra) {
  const std::string path = (dir / name).string();
  std::ofstream(path) << R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 4, "vocab_size": 256)" << extra
                      << "}";
  return path;
}

TEST(HfGpt2Config, ShapeAndAcceptedVariants) {
  const std::filesystem::path dir = geotrain::testing::scratch_dir("hf-config");
  const ModelShape m = read_hf_gpt2_config(config_file(dir, "ctx.json", R"(, "n_ctx": 48, "activation_function": "gelu_pytorch_tanh")"));
  EXPECT_EQ(m.layers, 2);
  EXPECT_EQ(m.hidden, 32);
  EXPECT_EQ(m.heads, 4);
  EXPECT_EQ(m.vocabulary, 256);
  EXPECT_EQ(m.sequence_length, 48) << "n_ctx where n_positions is absent";
  EXPECT_EQ(read_hf_gpt2_config(config_file(dir, "pos.json", R"(, "n_positions": 64, "n_ctx": 48, "n_inner": 128)"))
                .sequence_length,
            64);
}

TEST(HfGpt2Config, ArchitecturesGeotrainLacksAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(, "n_positions": 64, "activation_function": "gelu")", "activation_function: 'gelu' is not implemented"},
      {R"(, "n_positions": 64, "activation_function": 5)", "activation_function: must be a string"},
      {R"(, "n_positions": 1e999)", "not valid JSON (a number out of range)"},
      {R"(, "n_positions": 64, "scale_attn_by_inverse_layer_idx": true)", "scale_attn_by_inverse_layer_idx: true"},
      {R"(, "n_positions": 64, "scale_attn_weights": false)", "scale_attn_weights: false"},
      {R"(, "n_positions": 64, "tie_word_embeddings": false)", "tie_word_embeddings: false"},
      {R"(, "n_positions": 64, "architectures": ["GPT2ForSequenceClassification"])", "architectures: \"GPT2For"},
      {R"(, "n_positions": 64, "layer_norm_epsilon": 1e-6)", "layer_norm_epsilon: 1e-06 differs"},
      {R"(, "n_positions": 0)", "n_positions: must be a positive integer, got 0"},
      {"", "n_positions: missing"},
  };
  const std::filesystem::path dir = geotrain::testing::scratch_dir("hf-config");
  for (const auto& [extra, fragment] : cases) {
    const std::string path = config_file(dir, "bad.json", extra);
    const std::string error = error_of([&] { read_hf_gpt2_config(path); });
    EXPECT_NE(error.find(path + ": " + fragment), std::string::npos) << extra << " -> " << error;
  }
  const std::string odd = (dir / "odd.json").string();
  std::ofstream(odd) << R"({"n_layer": 1, "n_embd": 30, "n_head": 4, "vocab_size": 8, "n_positions": 4})";
  EXPECT_NE(error_of([&] { read_hf_gpt2_config(odd); }).find("n_head: 4 does not divide n_embd 30"), std::string::npos);
}

}  // namespace
}  // namespace geotrain::io
