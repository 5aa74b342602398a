// Scenario files (format: inputs/scenarios/README.md). Everything a user can
// get wrong is reported as one InputError line that names the file and the
// field: "<path>: <field>: <what is wrong> (<hint>)".
#include "geotrain/io/scenario.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <toml++/toml.h>

#include "scenario_internal.hpp"

namespace geotrain::io {
namespace {

using scenario_file::Reader;

std::string file_stem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

Scenario parse_toml_scenario(const Reader& r, const toml::table& root, const WorkloadOverrides& overrides) {
  const std::string& path = r.path();
  r.check_keys(root, "", {"scenario", "device_types", "network", "sites", "workload"});

  Scenario scenario;
  scenario.path = path;
  scenario.name = file_stem(path);
  if (const toml::table* info = r.optional_table(root, "scenario", "scenario")) {
    r.check_keys(*info, "scenario", {"name", "description", "source"});
    scenario.name = r.optional_string(*info, "name", "scenario.name").value_or(scenario.name);
    scenario.description = r.optional_string(*info, "description", "scenario.description").value_or("");
    scenario.source = r.optional_string(*info, "source", "scenario.source").value_or("");
  }
  scenario.network = scenario_file::read_network(r, root);
  scenario.workload =
      scenario_file::read_workload(r, root, overrides, scenario.network.device_count, scenario);

  return scenario;
}

}  // namespace

Scenario parse_scenario(std::string_view toml_text, const std::string& path, const WorkloadOverrides& overrides) {
  const Reader r(path);
  return parse_toml_scenario(r, r.parse(toml_text), overrides);
}

Scenario load_scenario(const std::string& path, const WorkloadOverrides& overrides) {
  const Reader r(path);
  return parse_toml_scenario(r, r.parse_file(), overrides);
}

}  // namespace geotrain::io
