// geotrain: one executable, one subcommand per job. Thin on purpose: parsing
// here, work in the libraries, errors mapped to the exit-code convention.
#include <CLI/CLI.hpp>
#include <iostream>

#include "geotrain/cli/commands.hpp"
#include "geotrain/io/errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"geotrain: pipeline + data-parallel training planned for slow, uneven networks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "geotrain 0.1.0");
  geotrain::cli::PlanCommandOptions plan_options;
  geotrain::cli::add_plan_command(app, plan_options);
  geotrain::cli::SimulateCommandOptions simulate_options;
  geotrain::cli::add_simulate_command(app, simulate_options);
#ifdef GEOTRAIN_HAVE_TRAINING
  geotrain::cli::TrainCommandOptions train_options;
  geotrain::cli::add_train_command(app, train_options);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "geotrain: command line: " << e.what() << " (see geotrain --help)\n";
    return geotrain::kExitInputError;
  }
  try {
    if (app.got_subcommand("plan")) return geotrain::cli::run_plan_command(plan_options);
    if (app.got_subcommand("simulate")) return geotrain::cli::run_simulate_command(simulate_options);
#ifdef GEOTRAIN_HAVE_TRAINING
    if (app.got_subcommand("train")) return geotrain::cli::run_train_command(train_options);
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
