// Model files: the shipped ones load; bad ones give one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "geotrain/common/errors.hpp"
#include "support/scratch_dir.hpp"
#include "geotrain/io/model_file.hpp"

namespace geotrain::io {
namespace {

std::string model_path(const std::string& name) {
  return std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/models/" + name + ".toml";
}

TEST(ModelFile, ShippedModelsLoad) {
  const ModelFile tiny = load_model_file(model_path("tiny"));
  EXPECT_EQ(tiny.model.layers, 4);
  EXPECT_EQ(tiny.model.vocabulary, 256);
  const ModelFile gpt2 = load_model_file(model_path("gpt2-124m"));
  EXPECT_EQ(gpt2.model.hidden, 768);
  EXPECT_EQ(gpt2.model.sequence_length, 1024);
  const ModelFile xl = load_model_file(model_path("gpt3-xl"));
  EXPECT_EQ(xl.model.layers, 24);
  EXPECT_EQ(xl.model.hidden, 2048);
  ASSERT_TRUE(xl.device.has_value());
  EXPECT_DOUBLE_EQ(xl.device->peak_tflops, 125.0);
  ASSERT_TRUE(xl.batch.has_value());
  EXPECT_EQ(xl.batch->global_batch_sequences, 1024);
}

TEST(ModelFile, BadFilesNameFileAndField) {
  const auto dir = geotrain::testing::scratch_dir("model-file");
  const std::string base = "[model]\nlayers = 2\nhidden = 8\nheads = 2\nsequence_length = 4\n";
  const std::pair<std::string, std::string> cases[] = {
      {base + "vocabulary = 0\n", "model.vocabulary: must be an integer >= 1"},
      {base, "model.vocabulary: missing"},
      {base + "vocabulary = 1638450257\n", "model.vocabulary: must be at most 1073741824, got 1638450257"},
      {base + "vocabulary = 9\nlayerz = 3\n", "model.layerz: unknown key"},
      {base + "vocabulary = 9\n[device]\npeak_tflops = -1\n", "device.peak_tflops: must be in"},
      {"[model]\nlayers = 2\nhidden = 10\nheads = 3\nsequence_length = 4\nvocabulary = 9\n", "model.heads: hidden 10"},
      {base + "vocabulary = 9\n[batch]\nglobal_batch_sequences = 10\nmicro_batch_sequences = 3\n",
       "batch.micro_batch_sequences: must divide"},
      {base + "vocabulary = 9\nname = 5\n", "model.name: must be a string"},
      {"[modle]\n", "modle: unknown key"},
      {"[model\n", "line 1"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string path = (dir / "bad.toml").string();
    std::ofstream(path) << text;
    try {
      load_model_file(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
      EXPECT_NE(message.find(expected), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace geotrain::io
