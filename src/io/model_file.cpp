#include "geotrain/io/model_file.hpp"

#include <filesystem>

#include "geotrain/common/errors.hpp"
#include "model_table.hpp"
#include "toml_reader.hpp"

namespace geotrain::io {
namespace {

double positive_number(const TomlReader& r, const toml::table& table, const std::string& field, const char* key,
                       double fallback, double max) {
  const std::optional<double> v = r.optional_number(table, key, field_key(field, key));
  if (!v) return fallback;
  if (!(*v > 0 && *v <= max)) r.fail(field_key(field, key), "must be in (0, " + shortest(max) + "], got " + shortest(*v));
  return *v;
}

DeviceSpeed read_device(const TomlReader& r, const toml::table& table) {
  r.check_keys(table, "device", {"peak_tflops", "efficiency"});
  DeviceSpeed d;
  d.peak_tflops = positive_number(r, table, "device", "peak_tflops", d.peak_tflops, 1e6);
  d.efficiency = positive_number(r, table, "device", "efficiency", d.efficiency, 1.0);
  return d;
}

BatchShape read_batch(const TomlReader& r, const toml::table& table) {
  r.check_keys(table, "batch", {"global_batch_sequences", "micro_batch_sequences"});
  BatchShape b;
  b.global_batch_sequences =
      r.optional_positive_int(table, "global_batch_sequences", "batch.global_batch_sequences").value_or(b.global_batch_sequences);
  b.micro_batch_sequences =
      r.optional_positive_int(table, "micro_batch_sequences", "batch.micro_batch_sequences").value_or(b.micro_batch_sequences);
  if (b.global_batch_sequences % b.micro_batch_sequences != 0) {
    r.fail("batch.micro_batch_sequences", "must divide batch.global_batch_sequences");
  }
  return b;
}

}  // namespace

bool read_model_shape(const TomlReader& r, const toml::table& table, const std::string& table_name,
                      const char* name_key, bool all_required, ModelShape& shape) {
  bool any = false;
  int* targets[] = {&shape.layers, &shape.hidden, &shape.heads, &shape.sequence_length, &shape.vocabulary};
  for (std::size_t i = 0; i < std::size(kModelShapeKeys); ++i) {
    const std::string field = field_key(table_name, kModelShapeKeys[i]);
    if (const std::optional<int> v = r.optional_positive_int(table, kModelShapeKeys[i], field)) {
      if (*v > kMaxModelDimension) {
        r.fail(field, "must be at most " + std::to_string(kMaxModelDimension) + ", got " + std::to_string(*v));
      }
      *targets[i] = *v;
      any = true;
    } else if (all_required) {
      r.fail(field, "missing (required)");
    }
  }
  if (const std::optional<std::string> name = r.optional_string(table, name_key, field_key(table_name, name_key))) {
    if (name->empty()) r.fail(field_key(table_name, name_key), "must not be empty");
    shape.name = *name;
    any = true;
  }
  check_model_shape(r, table_name, shape);
  return any;
}

void check_model_shape(const TomlReader& r, const std::string& table_name, const ModelShape& shape) {
  if (shape.hidden % shape.heads != 0) {
    r.fail(field_key(table_name, "heads"), "hidden " + std::to_string(shape.hidden) + " is not divisible by " +
                                               std::to_string(shape.heads) + " heads");
  }
}

ModelFile load_model_file(const std::string& path) {
  const TomlReader r(path);
  const toml::table root = r.parse_file();
  r.check_keys(root, "", {"model", "device", "batch"});
  const toml::table* model = r.optional_table(root, "model", "model");
  if (!model) r.fail("model", "missing [model] table");
  r.check_keys(*model, "model", {"name", "layers", "hidden", "heads", "sequence_length", "vocabulary", "lm_head"});

  ModelFile file;
  file.path = path;
  file.model.name = std::filesystem::path(path).stem().string();
  read_model_shape(r, *model, "model", "name", true, file.model);
  if (const std::optional<std::string> head = r.optional_string(*model, "lm_head", "model.lm_head")) {
    if (*head != "tied" && *head != "untied") r.fail("model.lm_head", "must be \"tied\" or \"untied\", got \"" + *head + "\"");
    file.model.tied_head = *head == "tied";
  }
  if (const toml::table* device = r.optional_table(root, "device", "device")) file.device = read_device(r, *device);
  if (const toml::table* batch = r.optional_table(root, "batch", "batch")) file.batch = read_batch(r, *batch);
  return file;
}

plan::TrainingShape training_shape(const ModelFile& file) {
  const BatchShape batch = file.batch.value_or(BatchShape{});
  const plan::TrainingShape defaults;
  return plan::TrainingShape(file.model, static_cast<double>(batch.global_batch_sequences) * file.model.sequence_length,
                             defaults.activation_bytes, defaults.gradient_bytes);
}

}  // namespace geotrain::io
