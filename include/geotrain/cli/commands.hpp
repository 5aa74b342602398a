// Subcommands of the geotrain executable. Each returns the process exit code.
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace geotrain::cli {

struct PlanCommandOptions {
  std::string scenario;
  int pp = 0, dp = 0;  // 0: from the scenario file
  unsigned long long seed = 1;
  int candidates = 5000;
  int random_samples = 5000;
  std::string local_search = "swap";
  bool paper_exact = false;
  int islands = 1;
  int threads = 1;
  bool json = false;
  bool skip_baselines = false;
};

void add_plan_command(CLI::App& app, PlanCommandOptions& options);
int run_plan_command(const PlanCommandOptions& options);

struct TrainCommandOptions {
  std::string config_file;
  std::vector<std::string> overrides;  // "--section.key=value"
};

void add_train_command(CLI::App& app, TrainCommandOptions& options);
int run_train_command(const TrainCommandOptions& options);

}  // namespace geotrain::cli
