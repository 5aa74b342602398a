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
// Exit-2 errors: overrides without a config, scenario-only flags with one.
void check_config_mode(const ConfigRunOptions& run, const char* command);
int run_plan_for_config(const ConfigRunOptions& run, const std::string& scenario, bool json);
int run_simulate_for_config(const ConfigRunOptions& run, const std::string& scenario, bool json);

}  // namespace geotrain::cli
