#include "geotrain/io/model_file.hpp"

#include <filesystem>
#include <set>
#include <toml++/toml.h>

#include "geotrain/io/errors.hpp"

namespace geotrain::io {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& key, const std::string& what) {
  throw InputError(path + ": " + key + ": " + what);
}

void reject_unknown(const std::string& path, const std::string& table_name, const toml::table& table,
                    const std::set<std::string>& known) {
  for (const auto& [key, value] : table) {
    if (!known.count(std::string(key.str()))) {
      std::string list;
      for (const auto& k : known) {
        if (!list.empty()) list += ", ";
        list += k;
      }
      fail(path, table_name + "." + std::string(key.str()), "unknown key (allowed here: " + list + ")");
    }
  }
}

int positive_int(const std::string& path, const toml::table& table, const std::string& table_name,
                 const char* key, int fallback) {
  const toml::node* node = table.get(key);
  if (!node) return fallback;
  if (!node->is_integer()) fail(path, table_name + "." + key, "must be an integer");
  const std::int64_t v = *node->value<std::int64_t>();
  if (v <= 0 || v > 1 << 30) fail(path, table_name + "." + key, "must be a positive integer, got " + std::to_string(v));
  return static_cast<int>(v);
}

double positive_number(const std::string& path, const toml::table& table, const std::string& table_name,
                       const char* key, double fallback, double max) {
  const toml::node* node = table.get(key);
  if (!node) return fallback;
  auto v = node->value<double>();
  if (!v) fail(path, table_name + "." + key, "must be a number");
  if (!(*v > 0 && *v <= max)) fail(path, table_name + "." + key, "must be in (0, " + std::to_string(max) + "]");
  return *v;
}

}  // namespace

ModelFile load_model_file(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    if (!std::filesystem::exists(path)) throw InputError(path + ": cannot open file");
    throw InputError(path + ": line " + std::to_string(e.source().begin.line) + ", column " +
                     std::to_string(e.source().begin.column) + ": TOML syntax error: " + std::string(e.description()));
  }
  reject_unknown(path, "(top level)", root, {"model", "device", "batch"});
  const toml::table* model = root["model"].as_table();
  if (!model) fail(path, "model", "missing [model] table");
  reject_unknown(path, "model", *model, {"name", "layers", "hidden", "heads", "sequence_length", "vocabulary"});

  ModelFile file;
  file.path = path;
  model::GptConfig& m = file.model;
  if (const toml::node* name = model->get("name"); name != nullptr && !name->is_string()) {
    fail(path, "model.name", "must be a string");
  }
  m.name = model->get("name") ? model->get("name")->value_or(std::string()) : std::filesystem::path(path).stem().string();
  m.layers = positive_int(path, *model, "model", "layers", 0);
  m.hidden = positive_int(path, *model, "model", "hidden", 0);
  m.heads = positive_int(path, *model, "model", "heads", 0);
  m.sequence_length = positive_int(path, *model, "model", "sequence_length", 0);
  m.vocabulary = positive_int(path, *model, "model", "vocabulary", 0);
  for (const char* key : {"layers", "hidden", "heads", "sequence_length", "vocabulary"}) {
    if (!model->get(key)) fail(path, std::string("model.") + key, "missing (required)");
  }
  if (m.hidden % m.heads != 0) {
    fail(path, "model.heads", "hidden " + std::to_string(m.hidden) + " is not divisible by " +
                                  std::to_string(m.heads) + " heads");
  }
  if (const toml::table* device = root["device"].as_table()) {
    reject_unknown(path, "device", *device, {"peak_tflops", "efficiency"});
    DeviceSpeed d;
    d.peak_tflops = positive_number(path, *device, "device", "peak_tflops", d.peak_tflops, 1e6);
    d.efficiency = positive_number(path, *device, "device", "efficiency", d.efficiency, 1.0);
    file.device = d;
  }
  if (const toml::table* batch = root["batch"].as_table()) {
    reject_unknown(path, "batch", *batch, {"global_batch_sequences", "micro_batch_sequences"});
    BatchShape b;
    b.global_batch_sequences = positive_int(path, *batch, "batch", "global_batch_sequences", b.global_batch_sequences);
    b.micro_batch_sequences = positive_int(path, *batch, "batch", "micro_batch_sequences", b.micro_batch_sequences);
    if (b.global_batch_sequences % b.micro_batch_sequences != 0) {
      fail(path, "batch.micro_batch_sequences", "must divide batch.global_batch_sequences");
    }
    file.batch = b;
  }
  return file;
}

}  // namespace geotrain::io
