// `plan CONFIG.toml` and `simulate CONFIG.toml`: a training config (the same
// file and --section.key=value overrides as `train`) priced as `train` would
// run it. Scenario-only use (--scenario FILE and the flags) is unchanged.
#pragma once
#include <string>
#include <vector>

#include "geotrain/cli/commands.hpp"

namespace CLI {
class App;
}

namespace geotrain::cli {

// The positional CONFIG, --ranks, and the overrides after it; flags other
// than `flags_allowed` are scenario-only settings that a config replaces.
void add_config_mode(CLI::App* command, ConfigRunOptions& run, std::vector<std::string> flags_allowed);
// The subcommand `name` of plan or simulate: the config mode (add_config_mode)
// and the settings without a config, --scenario FILE, --model FILE, --pp and
// --dp (which default to the scenario's [workload]).
struct ScenarioCommandText {
  const char* name;
  const char* description;
  const char* scenario;  // --scenario's help, before "; with CONFIG: the network"
  const char* model;     // --model's help
};
CLI::App* add_scenario_command(CLI::App& app, ScenarioCommandOptions& o, const ScenarioCommandText& text);
// Exit-2 errors: overrides without a config, scenario-only flags with one.
void check_config_mode(const ConfigRunOptions& run, const char* command);
int run_plan_for_config(const ConfigRunOptions& run, const std::string& scenario, bool json);
int run_simulate_for_config(const ConfigRunOptions& run, const std::string& scenario, bool json);

}  // namespace geotrain::cli
