// Device types in scenario files (inputs/scenarios/README.md, "Device
// types"): [device_types.NAME] with tflops and memory_gib, and the list that
// gives each site ([sites] device_type) or each device ([network]
// device_type) its type. Internal to the scenario reader (scenario_*.cpp).
#pragma once
#include <string>
#include <vector>

#include "geotrain/plan/network.hpp"
#include "toml_reader.hpp"

namespace geotrain::io {

// The file's [device_types], in key order; empty when the table is absent.
std::vector<plan::DeviceType> read_device_types(const TomlReader& r, const toml::table& root);

// `table`'s device_type list (field `field`, `count` entries naming
// `what`s: "site" or "device") as indices into `types`; empty when neither
// the list nor any type is given. Fails on a missing list while types are
// defined, a list without types, a wrong length or an unknown name.
std::vector<int> read_device_type_list(const TomlReader& r, const toml::table& table, const std::string& field,
                                       size_t count, const char* what, const std::vector<plan::DeviceType>& types);

}  // namespace geotrain::io
