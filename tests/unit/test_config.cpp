// The run configuration: file, overrides, and the one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "geotrain/io/config.hpp"
#include "support/scratch_dir.hpp"
#include "support/input_error.hpp"
#include "geotrain/common/errors.hpp"

namespace geotrain::io {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = geotrain::testing::scratch_dir("config") / name;
  std::ofstream(path) << text;
  return path.string();
}

using geotrain::testing::input_error_of;
std::string error_of(const std::function<void()>& f) { return input_error_of(f); }

TEST(Config, DefaultsAreValidAndPointAtShippedFiles) {
  const Config c = default_config();
  EXPECT_EQ(c.model.file, "inputs/models/tiny.toml");
  EXPECT_EQ(c.train.steps, 300);
  EXPECT_EQ(c.device.kind, DeviceRequest::automatic);
}

TEST(Config, FileValuesPathsAndOverrides) {
  const std::string path = write_temp("run.toml",
                                      "[train]\nsteps = 40\nseed = 9\n[optimizer]\nlearning_rate = 3e-4\n"
                                      "warmup_steps = 4\n[model]\nfile = \"models/x.toml\"\n[device]\nkind = \"cpu\"\n");
  const Config c = load_config(path, {"--train.steps=50", "optimizer.beta2=0.99", "--device.kind=auto"});
  EXPECT_EQ(c.train.steps, 50);
  EXPECT_EQ(c.train.seed, 9u);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.99);
  EXPECT_EQ(c.device.kind, DeviceRequest::automatic);
  EXPECT_EQ(c.model.file, (std::filesystem::path(path).parent_path() / "models/x.toml").string());
  EXPECT_NE(describe(c).find("train.steps = 50"), std::string::npos);
}

// describe() is one "key = value" line per key, and its file reads back: a
// sample prompt holds line breaks and quotes.
TEST(Config, DescribedStringsStayOneLineAndReadBack) {
  const std::string prompt = "Chapter 1\n\"Mr. Bennet\" \\ \t";
  const std::string path = write_temp("prompt.toml", "[train]\nsample_every_steps = 5\nsample_prompt = " +
                                                          std::string("\"Chapter 1\\n\\\"Mr. Bennet\\\" \\\\ \\t\"\n"));
  const Config c = load_config(path);
  ASSERT_EQ(c.train.sample_prompt, prompt);
  EXPECT_EQ(c.train.sample_every_steps, 5);
  EXPECT_EQ(c.train.sample_tokens, 64);
  const std::string text = describe(c);
  EXPECT_NE(text.find("train.sample_prompt = \"Chapter 1\\n\\\"Mr. Bennet\\\" \\\\ \\u0009\"\n"), std::string::npos)
      << text;
  // Back from the described lines, as a file ("section.key = value" -> [section] key = value).
  std::string as_file;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("train.sample_prompt = ", 0) == 0) as_file = "[train]\n" + line.substr(6) + "\n";
  }
  EXPECT_EQ(load_config(write_temp("described.toml", as_file)).train.sample_prompt, prompt);
}

TEST(Config, BadInputNamesFileAndKey) {
  struct Case {
    const char* text;
    std::vector<std::string> overrides;
    const char* expected;  // substring after the file name
  };
  const Case cases[] = {
      {"[train]\nstepz = 3\n", {}, "train.stepz: unknown key (did you mean 'train.steps'?)"},
      {"[pipeline]\nschedule = \"zb\"\n", {}, "pipeline.schedule: must be one of gpipe, 1f1b, got 'zb'"},
      {"[trian]\nsteps = 3\n", {}, "trian.steps: unknown key"},
      {"[train]\nsteps = \"many\"\n", {}, "train.steps: must be an integer"},
      {"[train]\nsteps = 0\n", {}, "train.steps: must be > 0"},
      {"[train]\nmicro_batch_sequences = -2\n", {}, "train.micro_batch_sequences: must be >= 0"},
      {"[optimizer]\nlearning_rate = nan\n", {}, "optimizer.learning_rate: must be in"},
      {"[optimizer]\nwarmup_steps = 500\n[train]\nsteps = 10\n", {}, "optimizer.warmup_steps: is 500, larger than train.steps (10): set it to at most 10"},
      {"[device]\nkind = \"tpu\"\n", {}, "device.kind: must be one of auto, cpu, cuda"},
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

TEST(Config, AValueFromTheCommandLineIsBlamedOnTheCommandLine) {
  const std::string path = write_temp("good.toml", "[train]\nsteps = 20\n");
  const std::string message = error_of([&] { load_config(path, {"--train.steps=0"}); });
  EXPECT_EQ(message.rfind("command line: train.steps: must be > 0", 0), 0u) << message;
  const std::string from_file = error_of([&] { load_config(write_temp("bad.toml", "[train]\nsteps = 0\n"), {}); });
  EXPECT_EQ(from_file.find("command line"), std::string::npos) << from_file;
}

// init_from starts a new run; an explicit resume continues another: not
// both. resume = auto may find nothing yet, so it combines (requeued jobs).
TEST(Config, InitFromExcludesAnExplicitResume) {
  const std::string message = error_of(
      [] { default_config({"--checkpoint.init_from=gpt2.h5", "--checkpoint.resume=runs/step_00000010.h5"}); });
  EXPECT_EQ(message.rfind("command line: checkpoint.init_from: cannot be combined with checkpoint.resume", 0), 0u)
      << message;
  const Config c = default_config({"--checkpoint.init_from=gpt2.h5", "--checkpoint.resume=auto", "--checkpoint.dir=ck"});
  EXPECT_EQ(c.checkpoint.init_from, "gpt2.h5");
}

// Checkpoints: asynchronous and auto (single alone, sharded under mpirun)
// by default; both keys typed and checked.
TEST(Config, CheckpointFormAndAsynchronousWrites) {
  const Config defaults = default_config();
  EXPECT_TRUE(defaults.checkpoint.asynchronous);
  EXPECT_EQ(defaults.checkpoint.form, CheckpointForm::automatic);
  const Config c = default_config({"--checkpoint.form=sharded", "--checkpoint.asynchronous=false"});
  EXPECT_EQ(c.checkpoint.form, CheckpointForm::sharded);
  EXPECT_FALSE(c.checkpoint.asynchronous);
  EXPECT_FALSE(defaults.checkpoint.snapshot);
  EXPECT_TRUE(default_config({"--checkpoint.snapshot=true"}).checkpoint.snapshot);
  EXPECT_EQ(defaults.checkpoint.deadline_s, 3600.0);
  EXPECT_EQ(default_config({"--checkpoint.deadline_s=90"}).checkpoint.deadline_s, 90.0);
  EXPECT_NE(error_of([] { default_config({"--checkpoint.deadline_s=0"}); }).find("checkpoint.deadline_s"),
            std::string::npos);
  EXPECT_NE(describe(c).find("checkpoint.form = \"sharded\""), std::string::npos);
  EXPECT_EQ(default_config({"--checkpoint.form=parallel"}).checkpoint.form, CheckpointForm::parallel);
  EXPECT_EQ(default_config({"--checkpoint.form=per_site"}).checkpoint.form, CheckpointForm::per_site);
  const std::string message = error_of([] { default_config({"--checkpoint.form=everywhere"}); });
  EXPECT_EQ(message,
            "command line: checkpoint.form: must be one of auto, single, sharded, parallel, per_site, got 'everywhere'");
  EXPECT_NE(error_of([] { default_config({"--checkpoint.asynchronous=yes"}); })
                .find("checkpoint.asynchronous: must be true or false"),
            std::string::npos);
}

TEST(Config, TypedChoicesAreParsedOnce) {
  const Config c = default_config({"--pipeline.schedule=gpipe", "--pipeline.placement=rank-order",
                                   "--network.transport=mpi", "--device.kind=cpu", "--device.matmul_precision=bf16"});
  EXPECT_EQ(c.pipeline.schedule, plan::Schedule::gpipe);
  EXPECT_EQ(c.pipeline.placement, plan::Placement::rank_order);
  EXPECT_EQ(c.network.transport, Transport::mpi);
  EXPECT_EQ(c.device.kind, DeviceRequest::cpu);
  EXPECT_EQ(c.device.matmul_precision, MatmulPrecision::bf16);
  // describe() writes them back as the names a file accepts.
  EXPECT_NE(describe(c).find("pipeline.schedule = \"gpipe\""), std::string::npos);
}

TEST(Config, ActivationStorage) {
  EXPECT_EQ(default_config().device.activation_storage, ActivationStorage::fp32);
  const Config c = default_config({"--device.activation_storage=bf16"});
  EXPECT_EQ(c.device.activation_storage, ActivationStorage::bf16);
  EXPECT_NE(describe(c).find("device.activation_storage = \"bf16\""), std::string::npos);
  EXPECT_EQ(error_of([] { default_config({"--device.activation_storage=fp16"}); }),
            "command line: device.activation_storage: must be one of fp32, bf16, got 'fp16'");
}

// compression.tied_embedding: any gradient format, encoded on the host (not with NCCL).
TEST(Config, TiedEmbeddingWire) {
  EXPECT_EQ(default_config().compression.tied_embedding, WireFormat::fp32);
  const Config c = default_config({"--compression.tied_embedding=int4"});
  EXPECT_EQ(c.compression.tied_embedding, WireFormat::int4);
  EXPECT_NE(describe(c).find("compression.tied_embedding = \"int4\""), std::string::npos);
  EXPECT_EQ(default_config({"--compression.tied_embedding=topk"}).compression.tied_embedding, WireFormat::topk);
  EXPECT_EQ(error_of([] { default_config({"--compression.tied_embedding=int8", "--network.transport=nccl"}); }),
            "command line: compression.tied_embedding: needs network.transport = mpi (NCCL sums fp32 on the GPU)");
  EXPECT_NE(error_of([] { default_config({"--compression.tied_embedding=int2"}); })
                .find("compression.tied_embedding: must be one of"),
            std::string::npos);
}

// pipeline.layout and the emulation's per-rank slowdown (a list of numbers).
TEST(Config, LayoutChoiceAndComputeSlowdown) {
  const Config c = default_config({"--pipeline.layout=auto", "--emulation.compute_slowdown=[1, 2.5, 4]"});
  EXPECT_EQ(c.pipeline.layout, LayoutChoice::automatic);
  EXPECT_EQ(c.emulation.compute_slowdown, (std::vector<double>{1.0, 2.5, 4.0}));
  EXPECT_NE(describe(c).find("emulation.compute_slowdown = [1, 2.5, 4]"), std::string::npos);
  EXPECT_NE(describe(c).find("pipeline.layout = \"auto\""), std::string::npos);
  EXPECT_EQ(default_config().pipeline.layout, LayoutChoice::fixed);
  EXPECT_NE(error_of([] { default_config({"--emulation.compute_slowdown=[1, 0.5]"}); })
                .find("emulation.compute_slowdown: must be in [1.000000, 1000.000000], got 0.5"),
            std::string::npos);
  EXPECT_NE(error_of([] { default_config({"--emulation.compute_slowdown=[1, \"x\"]"}); })
                .find("emulation.compute_slowdown: must be a list of numbers"),
            std::string::npos);
  EXPECT_NE(error_of([] { default_config({"--pipeline.layout=best"}); })
                .find("pipeline.layout: must be one of fixed, auto, got 'best'"),
            std::string::npos);
  EXPECT_NE(error_of([] { default_config({"--train.gradient_accumulation=6", "--pipeline.micro_batches_per_flush=4"}); })
                .find("pipeline.micro_batches_per_flush: is 4, which does not divide train.gradient_accumulation (6)"),
            std::string::npos);
  EXPECT_EQ(default_config({"--train.gradient_accumulation=6", "--pipeline.micro_batches_per_flush=3"}).pipeline.micro_batches_per_flush, 3);
  EXPECT_NE(error_of([] { default_config({"--pipeline.plan_file=p.json", "--pipeline.layout=auto"}); })
                .find("pipeline.plan_file: cannot be combined with pipeline.layout = auto"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              default_config({"--pipeline.layout=auto", "--pipeline.stages=2", "--pipeline.layers_per_stage=[3, 1]"});
            }).find("pipeline.layers_per_stage: cannot be combined with pipeline.layout = auto"),
            std::string::npos);
}

TEST(Config, ModelShapeOverridesApplyOnTopOfTheModelFile) {
  const std::string tiny = std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/models/tiny.toml";
  const Config c = default_config({"--model.file=" + tiny, "--model.sequence_length=64", "--model.layers=2"});
  const ModelFile file = load_model(c);
  EXPECT_EQ(file.model.sequence_length, 64);
  EXPECT_EQ(file.model.layers, 2);
  EXPECT_EQ(file.model.hidden, 128);  // tiny.toml's
  const Config bad = default_config({"--model.file=" + tiny, "--model.heads=3"});
  EXPECT_EQ(error_of([&] { load_model(bad); }), "command line: model.heads: hidden 128 is not divisible by 3 heads");
  EXPECT_EQ(error_of([&] { default_config({"--model.vocabulary=2000000000"}); }),
            "command line: model.vocabulary: must be in [1, 1073741824], got 2000000000");
}

// docs/config.md is generated from the settings tree; a key added, renamed or
// documented anew without regenerating the page fails here.
TEST(ConfigReference, DocsPageIsCurrent) {
  const std::string path = std::string(GEOTRAIN_SOURCE_DIR) + "/docs/config.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing: build/release/geotrain train --help-markdown > docs/config.md";
  std::stringstream page;
  page << in.rdbuf();
  EXPECT_TRUE(page.str() == config_reference_markdown())
      << "docs/config.md is stale: regenerate it with build/release/geotrain train --help-markdown > docs/config.md";
}

// Every key describe() writes is in the reference with a doc string, and
// describe()'s dotted-key lines read back as a config file to the same values.
TEST(ConfigReference, DescribeIsTomlThatReadsBack) {
  const std::string inputs = std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/";
  const Config c = default_config({"--model.file=" + inputs + "models/tiny.toml", "--data.train=" + inputs + "data/corpus_train.bin",
                                   "--data.validation=" + inputs + "data/corpus_val.bin", "--train.sample_prompt=once upon",
                                   "--compression.gradients=int4", "--pipeline.layers_per_stage=[3]",
                                   "--emulation.compute_slowdown=[1.5]", "--outer.local_steps=4"});
  const std::string described = describe(c);
  EXPECT_EQ(describe(load_config(write_temp("described-all.toml", described))), described);
  const std::string text = config_reference_text();
  std::istringstream lines(described);
  int keys = 0;
  for (std::string line; std::getline(lines, line); ++keys) {
    const std::string key = line.substr(0, line.find(" = "));
    EXPECT_NE(text.find("  " + key + " = "), std::string::npos) << key << " is not in the reference";
  }
  EXPECT_GE(keys, 77);
}

}  // namespace
}  // namespace geotrain::io
