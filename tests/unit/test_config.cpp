// The run configuration: file, overrides, and the one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "geotrain/io/config.hpp"
#include "geotrain/io/errors.hpp"

namespace geotrain::io {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "geotrain-config-test";
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsAreValidAndPointAtShippedFiles) {
  const Config c = default_config();
  EXPECT_EQ(c.model_file, "inputs/models/tiny.toml");
  EXPECT_EQ(c.train_steps, 300);
  EXPECT_EQ(c.device, "auto");
}

TEST(Config, FileValuesPathsAndOverrides) {
  const std::string path = write_temp("run.toml",
                                      "[train]\nsteps = 40\nseed = 9\n[optimizer]\nlearning_rate = 3e-4\n"
                                      "warmup_steps = 4\n[model]\nfile = \"models/x.toml\"\n[device]\nkind = \"cpu\"\n");
  const Config c = load_config(path, {"--train.steps=50", "optimizer.beta2=0.99", "--device.kind=auto"});
  EXPECT_EQ(c.train_steps, 50);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_DOUBLE_EQ(c.learning_rate, 3e-4);
  EXPECT_DOUBLE_EQ(c.beta2, 0.99);
  EXPECT_EQ(c.device, "auto");
  EXPECT_EQ(c.model_file, (std::filesystem::path(path).parent_path() / "models/x.toml").string());
  EXPECT_NE(describe(c).find("train.steps = 50"), std::string::npos);
}

TEST(Config, BadInputNamesFileAndKey) {
  struct Case {
    const char* text;
    std::vector<std::string> overrides;
    const char* expected;  // substring after the file name
  };
  const Case cases[] = {
      {"[train]\nstepz = 3\n", {}, "train.stepz: unknown key"},
      {"[trian]\nsteps = 3\n", {}, "trian.steps: unknown key"},
      {"[train]\nsteps = \"many\"\n", {}, "train.steps: must be an integer"},
      {"[train]\nsteps = 0\n", {}, "train.steps: must be > 0"},
      {"[train]\nmicro_batch_sequences = -2\n", {}, "train.micro_batch_sequences: must be >= 0"},
      {"[optimizer]\nlearning_rate = nan\n", {}, "optimizer.learning_rate: must be in"},
      {"[optimizer]\nwarmup_steps = 500\n[train]\nsteps = 10\n", {}, "optimizer.warmup_steps: is larger"},
      {"[device]\nkind = \"tpu\"\n", {}, "device.kind: must be auto, cpu or cuda"},
      {"steps = 3\n", {}, "steps: expected a table"},
      {"[train\n", {}, "line 1"},
  };
  for (const Case& c : cases) {
    const std::string path = write_temp("bad.toml", c.text);
    const std::string message = error_of([&] { load_config(path, c.overrides); });
    EXPECT_NE(message.find(path + ": "), std::string::npos) << c.text << " -> " << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.text << " -> " << message;
  }
  EXPECT_NE(error_of([] { default_config({"--train.bogus=1"}); }).find("command line: train.bogus: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of([] { default_config({"--train.steps"}); }).find("expected --section.key=value"),
            std::string::npos);
  EXPECT_NE(error_of([] { default_config({"--train.steps=x1"}); }).find("train.steps: must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { default_config({"--train.steps=5\nseed = 7"}); }).find("train.steps: must not contain a line break"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_config("/nonexistent/run.toml"); }).find("/nonexistent/run.toml: cannot open file"),
            std::string::npos);
}

}  // namespace
}  // namespace geotrain::io
