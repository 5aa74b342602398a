// geotrain: one executable, one subcommand per job. Thin on purpose: parsing
// here, work in the libraries, errors mapped to the exit-code convention.
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include "geotrain/cli/commands.hpp"
#include "geotrain/common/errors.hpp"

namespace {

// OpenBLAS and OpenMP worker threads spin for a while after each call; on a
// CPU the two pools alternate (GEMMs, then elementwise loops), so each one's
// spinning steals the cores the other needs. Both libraries read these
// variables when they load, before main: set them and start again, once.
void restart_with_quiet_thread_pools(char** argv) {
  if (std::getenv("GEOTRAIN_THREAD_POOLS_SET") != nullptr) return;
  setenv("GEOTRAIN_THREAD_POOLS_SET", "1", 1);
  setenv("OMP_WAIT_POLICY", "passive", 0);       // 0: a user's own choice wins
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);     // 2^4 cycles: the minimum
  // Several ranks on one node: each would start a thread per core and they
  // would fight. A rank bound to some cores uses those; an unbound one its
  // share of the node (ranks of this node from the launcher).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    int threads = 0;
    cpu_set_t allowed;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int usable = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : static_cast<int>(online);
    if (const char* per_task = std::getenv("SLURM_CPUS_PER_TASK")) {
      threads = std::atoi(per_task);
    } else if (usable < online) {
      threads = usable;
    } else {
      for (const char* local : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
        if (const char* value = std::getenv(local); value != nullptr && std::atoi(value) > 0) {
          threads = std::max(1, usable / std::atoi(value));
          break;
        }
      }
    }
    if (threads > 0) {
      setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
      setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(), 0);
    }
  }
  execv("/proc/self/exe", argv);                 // returns only on failure: carry on as we are
}

// Each subcommand's options, how it is added to the parser and what runs it.
class Subcommands {
 public:
  explicit Subcommands(CLI::App& app) : app_(app) {}

  template <class Options, class Add, class Run>
  void add(const char* name, Add add_command, Run run_command) {
    auto options = std::make_shared<Options>();
    add_command(app_, *options);
    commands_.push_back({name, [options, run_command] { return run_command(*options); }});
  }

  int run_chosen() const {
    for (const auto& [name, run] : commands_) {
      if (app_.got_subcommand(name)) return run();
    }
    return 0;
  }

 private:
  CLI::App& app_;
  std::vector<std::pair<std::string, std::function<int()>>> commands_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "train") == 0 || std::strcmp(argv[1], "eval") == 0 ||
                   std::strcmp(argv[1], "sample") == 0)) {
    restart_with_quiet_thread_pools(argv);
  }
  CLI::App app{"geotrain: pipeline + data-parallel training planned for slow, uneven networks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "geotrain 0.1.0");
  Subcommands commands(app);
  commands.add<geotrain::cli::PlanCommandOptions>("plan", geotrain::cli::add_plan_command, geotrain::cli::run_plan_command);
  commands.add<geotrain::cli::SimulateCommandOptions>("simulate", geotrain::cli::add_simulate_command,
                                                      geotrain::cli::run_simulate_command);
  commands.add<geotrain::cli::ConvertCommandOptions>("convert", geotrain::cli::add_convert_command,
                                                     geotrain::cli::run_convert_command);
#ifdef GEOTRAIN_HAVE_MPI
  commands.add<geotrain::cli::ProbeCommandOptions>("probe", geotrain::cli::add_probe_command, geotrain::cli::run_probe_command);
#endif
#ifdef GEOTRAIN_HAVE_TRAINING
  commands.add<geotrain::cli::TrainCommandOptions>("train", geotrain::cli::add_train_command, geotrain::cli::run_train_command);
  commands.add<geotrain::cli::SampleCommandOptions>("sample", geotrain::cli::add_sample_command,
                                                    geotrain::cli::run_sample_command);
  commands.add<geotrain::cli::EvalCommandOptions>("eval", geotrain::cli::add_eval_command, geotrain::cli::run_eval_command);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version, train --help-markdown
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "geotrain: command line: " << e.what() << " (see geotrain --help)\n";
    return geotrain::kExitInputError;
  }
  try {
    return commands.run_chosen();
  } catch (const geotrain::InputError& e) {
    std::cerr << "geotrain: error: " << e.what() << "\n";
    return geotrain::kExitInputError;
  } catch (const std::exception& e) {
    std::cerr << "geotrain: failed: " << e.what() << "\n";
    return geotrain::kExitRunError;
  }
}
