// geotrain: one executable, one subcommand per job. Thin on purpose: parsing
// here, work in the libraries, errors mapped to the exit-code convention.
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <cstring>
#include <iostream>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "train") == 0 || std::strcmp(argv[1], "eval") == 0 ||
                   std::strcmp(argv[1], "sample") == 0)) {
    restart_with_quiet_thread_pools(argv);
  }
  CLI::App app{"geotrain: pipeline + data-parallel training planned for slow, uneven networks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "geotrain 0.1.0");
  geotrain::cli::PlanCommandOptions plan_options;
  geotrain::cli::add_plan_command(app, plan_options);
  geotrain::cli::SimulateCommandOptions simulate_options;
  geotrain::cli::add_simulate_command(app, simulate_options);
  geotrain::cli::ConvertCommandOptions convert_options;
  geotrain::cli::add_convert_command(app, convert_options);
#ifdef GEOTRAIN_HAVE_MPI
  geotrain::cli::ProbeCommandOptions probe_options;
  geotrain::cli::add_probe_command(app, probe_options);
#endif
#ifdef GEOTRAIN_HAVE_TRAINING
  geotrain::cli::TrainCommandOptions train_options;
  geotrain::cli::add_train_command(app, train_options);
  geotrain::cli::SampleCommandOptions sample_options;
  geotrain::cli::add_sample_command(app, sample_options);
  geotrain::cli::EvalCommandOptions eval_options;
  geotrain::cli::add_eval_command(app, eval_options);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "geotrain: command line: " << e.what() << " (see geotrain --help)\n";
    return geotrain::kExitInputError;
  }
  try {
    if (app.got_subcommand("plan")) return geotrain::cli::run_plan_command(plan_options);
    if (app.got_subcommand("simulate")) return geotrain::cli::run_simulate_command(simulate_options);
    if (app.got_subcommand("convert")) return geotrain::cli::run_convert_command(convert_options);
#ifdef GEOTRAIN_HAVE_MPI
    if (app.got_subcommand("probe")) return geotrain::cli::run_probe_command(probe_options);
#endif
#ifdef GEOTRAIN_HAVE_TRAINING
    if (app.got_subcommand("train")) return geotrain::cli::run_train_command(train_options);
    if (app.got_subcommand("sample")) return geotrain::cli::run_sample_command(sample_options);
    if (app.got_subcommand("eval")) return geotrain::cli::run_eval_command(eval_options);
#endif
  } catch (const geotrain::InputError& e) {
    std::cerr << "geotrain: error: " << e.what() << "\n";
    return geotrain::kExitInputError;
  } catch (const std::exception& e) {
    std::cerr << "geotrain: failed: " << e.what() << "\n";
    return geotrain::kExitRunError;
  }
  return 0;
}
