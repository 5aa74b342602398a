// The one reader of a model's shape keys, shared by model files ([model])
// and scenarios ([workload], which name the model `model_name`).
#pragma once
#include <string>
#include <toml++/toml.h>

#include "geotrain/common/model_shape.hpp"
#include "toml_reader.hpp"

namespace geotrain::io {

// The shape keys read by read_model_shape (besides the name key).
inline constexpr const char* kModelShapeKeys[] = {"layers", "hidden", "heads", "sequence_length", "vocabulary"};

// Reads whichever shape keys `table` holds into `shape` (name from
// `name_key`); `all_required`: a missing one is an error. Returns whether
// any key was present. Checks the result with check_model_shape.
bool read_model_shape(const TomlReader& r, const toml::table& table, const std::string& table_name,
                      const char* name_key, bool all_required, ModelShape& shape);

// Heads must divide hidden; `table_name`.heads is named when they do not.
void check_model_shape(const TomlReader& r, const std::string& table_name, const ModelShape& shape);

}  // namespace geotrain::io
