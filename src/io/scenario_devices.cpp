#include "scenario_devices.hpp"

#include <algorithm>
#include <cmath>

namespace geotrain::io {
namespace {

double positive_number(const TomlReader& r, const toml::table& table, const char* key, const std::string& field,
                       const char* unit) {
  const std::string name = field_key(field, key);
  const double value = r.number(r.required(table, key, name), name);
  if (!(std::isfinite(value) && value > 0.0)) r.fail(name, "must be a finite number > 0, got " + shortest(value), unit);
  return value;
}

}  // namespace

std::vector<plan::DeviceType> read_device_types(const TomlReader& r, const toml::table& root) {
  const toml::table* table = r.optional_table(root, "device_types", "device_types");
  if (table == nullptr) return {};
  if (table->empty()) r.fail("device_types", "defines no type", "add [device_types.NAME] with tflops and memory_gib");
  std::vector<plan::DeviceType> types;
  for (const auto& [key, node] : *table) {
    const std::string name(key.str());
    const std::string field = field_key("device_types", name);
    if (!node.is_table()) r.fail(field, "must be a table ([device_types." + name + "]), got " + type_name(node));
    const toml::table& entry = *node.as_table();
    r.check_keys(entry, field, {"tflops", "memory_gib"});
    plan::DeviceType type;
    type.name = name;
    type.tflops = positive_number(r, entry, "tflops", field, "dense TFLOPS at the run's precision");
    type.memory_bytes = positive_number(r, entry, "memory_gib", field, "device memory in GiB") * plan::kBytesPerGib;
    if (!std::isfinite(type.memory_bytes)) r.fail(field_key(field, "memory_gib"), "is too large");
    types.push_back(type);
  }
  return types;
}

std::vector<int> read_device_type_list(const TomlReader& r, const toml::table& table, const std::string& field,
                                       size_t count, const char* what, const std::vector<plan::DeviceType>& types) {
  const toml::node* node = table.get("device_type");
  if (node == nullptr) {
    if (!types.empty()) {
      r.fail(field, "missing required field",
             "[device_types] is defined: give one type name per " + std::string(what));
    }
    return {};
  }
  const std::vector<std::string> names = r.strings(*node, field);
  if (names.size() != count) {
    r.fail(field, "has " + std::to_string(names.size()) + " names but there are " + std::to_string(count) + " " +
           what + "s", "one type name per " + std::string(what));
  }
  std::vector<std::string> known;
  for (const auto& type : types) known.push_back(type.name);
  std::vector<int> indices;
  for (size_t i = 0; i < names.size(); ++i) {
    const auto it = std::find(known.begin(), known.end(), names[i]);
    if (it == known.end()) {
      const std::string near = closest_name(names[i], known);
      r.fail(field_index(field, i), "unknown device type \"" + names[i] + "\"",
             !near.empty() ? "did you mean \"" + near + "\"?"
             : known.empty() ? "define it as [device_types." + names[i] + "] with tflops and memory_gib"
                             : "defined: " + join_names(known));
    }
    indices.push_back(static_cast<int>(it - known.begin()));
  }
  return indices;
}

}  // namespace geotrain::io
