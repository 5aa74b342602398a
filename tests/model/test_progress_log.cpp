// The progress lines, the JSON lines and the metrics file of a run.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "geotrain/runtime/progress_log.hpp"
#include "support/scratch_dir.hpp"

namespace geotrain::runtime {
namespace {

StepReport step_with_loss(int step, double loss) {
  StepReport r;
  r.step = step;
  r.loss = loss;
  r.learning_rate = 1e-3;
  r.grad_norm = 1;
  r.step_s = 0.5;
  r.tokens_per_step = 1000;
  r.model_flops_per_token = 1e6;
  r.compute_s = 0.25;
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ProgressLog, APrintedLossIsTheMeanOfItsInterval) {
  io::Config config;
  config.train.steps = 6;
  config.train.log_every_steps = 3;
  config.train.metrics_file = "";
  std::ostringstream out;
  ProgressLog log(config, out, true, 0);
  const double losses[] = {1, 1, 10, 2, 2, 2};  // a spike at step 3
  for (int i = 0; i < 6; ++i) log.step(step_with_loss(i + 1, losses[i]));
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 2u) << out.str();
  EXPECT_NE(lines[0].find("step     3/6 | loss 4.0000"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("step     6/6 | loss 2.0000"), std::string::npos) << lines[1];
  // Compute 0.25 s of a 0.5 s step; no peak known: no MFU.
  EXPECT_NE(lines[0].find("util  50%"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("MFU"), std::string::npos) << lines[0];
}

TEST(ProgressLog, JsonModeWritesOnlyJsonLinesAndTheMetricsFileEveryStep) {
  io::Config config;
  config.train.steps = 4;
  config.train.log_every_steps = 2;
  config.train.log_json = true;
  config.train.metrics_file = (geotrain::testing::scratch_dir("progress") / "m.jsonl").string();
  std::ostringstream out;
  {
    ProgressLog log(config, out, true, 0.002);  // 2 GFLOP/s peak
    for (int i = 1; i <= 4; ++i) log.step(step_with_loss(i, i));
    log.validation(4, 3.5);
    log.checkpoint(4, "dir/step \"4\".h5");
    log.text() << "a note\n";
    RunEnd end;
    end.steps = 4;
    end.final_validation_loss = 3.5;
    end.utilisation_mean = 0.5;
    log.end(end);
  }
  const auto printed = lines_of(out.str());
  ASSERT_EQ(printed.size(), 5u) << out.str();  // steps 2 and 4, validation, checkpoint, end: no text
  for (const auto& line : printed) EXPECT_TRUE(line.front() == '{' && line.back() == '}') << line;
  // Step 4's record: its own loss, and the mean of steps 3 and 4; MFU = 2 GFLOP/s of 2.
  EXPECT_NE(printed[1].find("\"step\": 4, \"loss\": 4,"), std::string::npos) << printed[1];
  EXPECT_NE(printed[1].find("\"interval_mean_loss\": 3.5, \"interval_steps\": 2"), std::string::npos) << printed[1];
  EXPECT_NE(printed[1].find("\"mfu\": 1.0000"), std::string::npos) << printed[1];
  EXPECT_NE(printed[3].find("\"path\": \"dir/step \\\"4\\\".h5\""), std::string::npos) << printed[3];
  EXPECT_NE(printed[4].find("\"event\": \"end\""), std::string::npos) << printed[4];
  std::ifstream file(config.train.metrics_file);
  std::stringstream saved;
  saved << file.rdbuf();
  const auto recorded = lines_of(saved.str());
  ASSERT_EQ(recorded.size(), 7u) << saved.str();  // every step, validation, checkpoint, end
  EXPECT_NE(recorded[0].find("\"step\": 1, \"loss\": 1,"), std::string::npos) << recorded[0];
}

TEST(ProgressLog, KnownGpusHaveTheirDatasheetPeak) {
  EXPECT_EQ(known_peak_tflops("CUDA, NVIDIA H100 80GB HBM3 (compute capability 9.0)", MatmulPrecision::bf16), 989);
  EXPECT_EQ(known_peak_tflops("CUDA, NVIDIA H100 PCIe (compute capability 9.0)", MatmulPrecision::bf16), 756);
  EXPECT_EQ(known_peak_tflops("CUDA, NVIDIA A100-SXM4-40GB (...)", MatmulPrecision::fp32), 19.5);
  EXPECT_EQ(known_peak_tflops("CUDA, Some Future GPU (...)", MatmulPrecision::bf16), 0);
  EXPECT_EQ(known_peak_tflops("CPU, OpenBLAS", MatmulPrecision::bf16), 0);
  io::Config config;
  config.device.peak_tflops = 42;
  EXPECT_EQ(peak_tflops(config, "CUDA, NVIDIA H200"), 42);  // the user's value wins
}

// Bytes that are not UTF-8 (a sampled byte token) become U+FFFD per maximal
// ill-formed subpart; the expected strings are Python's
// bytes.decode("utf-8", "replace") of the same bytes.
TEST(JsonString, ReplacesBytesThatAreNotUtf8AsPythonDecodes) {
  const std::pair<std::string, std::string> cases[] = {
      {"a\xe1\x80x", "\"a\\ufffdx\""},
      {"\xc3", "\"\\ufffd\""},
      {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},         // a surrogate
      {"\xf0\x9f\x91\x8d", "\"\xf0\x9f\x91\x8d\""},            // well formed: kept
      {"\xff\xfe", "\"\\ufffd\\ufffd\""},
      {"\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\""},         // overlong
      {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},  // past U+10FFFF
      {"\xc3\xa9\xc3", "\"\xc3\xa9\\ufffd\""},
      {"q\"\\\n", "\"q\\\"\\\\\\u000a\""},
  };
  for (const auto& [text, json] : cases) EXPECT_EQ(json_string(text), json) << text;
}

}  // namespace
}  // namespace geotrain::runtime
