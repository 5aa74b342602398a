#include <CLI/CLI.hpp>
#include <iostream>

#include "geotrain/cli/commands.hpp"
#include "geotrain/io/config.hpp"
#include "geotrain/io/model_file.hpp"
#include "geotrain/runtime/trainer.hpp"

namespace geotrain::cli {

void add_train_command(CLI::App& app, TrainCommandOptions& o) {
  CLI::App* train = app.add_subcommand(
      "train", "Train a GPT model: geotrain train [CONFIG.toml] [--section.key=value ...]");
  train->add_option("config", o.config_file, "run configuration (TOML); defaults without it");
  train->allow_extras();  // --section.key=value overrides, checked by the config loader
  train->callback([train, &o] { o.overrides = train->remaining(); });
}

int run_train_command(const TrainCommandOptions& o) {
  const io::Config config = o.config_file.empty() ? io::default_config(o.overrides)
                                                  : io::load_config(o.config_file, o.overrides);
  const io::ModelFile model = io::load_model_file(config.model_file);
  const runtime::TrainResult result = runtime::train_single_rank(config, model.model, std::cout);
  std::cout << "final validation loss " << result.final_validation_loss << " (before training "
            << result.initial_validation_loss << "), " << static_cast<long>(result.tokens_per_second)
            << " tokens/s\n";
  return 0;
}

}  // namespace geotrain::cli
