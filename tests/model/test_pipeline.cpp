// Pipeline execution: p stages, each on its own thread with its own Stage,
// exchanging activations and gradients through an in-process mailbox, must
// give the loss and gradients of the single stage that accumulates the same
// micro-batches, for GPipe and 1F1B, with fp32 and with bf16 activation
// storage (whose backward reads the rounded inputs wherever the stages are
// cut, so the cut does not change the result). The MPI links replace the mailbox
// between ranks; the programs and the stage code are the same.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/runtime/pipeline.hpp"

namespace geotrain::runtime {
namespace {

using geotrain::ModelShape;
using model::Stage;
using model::StageSpec;

// Messages keyed by (gradient?, boundary between stage b and b+1, micro-batch).
class Mailbox {
 public:
  void put(bool gradient, int boundary, int micro, const float* data, std::size_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    messages_[{gradient, boundary, micro}].assign(data, data + count);
    ready_.notify_all();
  }
  void take(bool gradient, int boundary, int micro, float* data, std::size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto key = std::make_tuple(gradient, boundary, micro);
    // A deadline instead of waiting forever: a schedule bug fails the test.
    if (!ready_.wait_for(lock, std::chrono::seconds(60), [&] { return messages_.count(key) > 0; })) {
      throw std::runtime_error("mailbox: message never arrived");
    }
    const auto& message = messages_[key];
    if (message.size() != count) throw std::runtime_error("mailbox: wrong message size");
    std::copy(message.begin(), message.end(), data);
    messages_.erase(key);
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::tuple<bool, int, int>, std::vector<float>> messages_;
};

class MailboxLinks : public PipelineLinks {
 public:
  MailboxLinks(Mailbox& box, int stage) : box_(box), stage_(stage) {}
  void send_activation(const float* d, std::size_t n, int i) override { box_.put(false, stage_, i, d, n); }
  void receive_activation(float* d, std::size_t n, int i) override { box_.take(false, stage_ - 1, i, d, n); }
  void send_gradient(const float* d, std::size_t n, int i) override { box_.put(true, stage_ - 1, i, d, n); }
  void receive_gradient(float* d, std::size_t n, int i) override { box_.take(true, stage_, i, d, n); }

 private:
  Mailbox& box_;
  int stage_;
};

const ModelShape kModel{.name = "pipeline", .layers = 4, .hidden = 32, .heads = 2, .vocabulary = 64,
                       .sequence_length = 16};
constexpr int kMicroBatch = 2, kMicroBatches = 4;

struct Data {
  std::vector<std::vector<int>> tokens, targets;
  std::vector<MicroBatch> batches() const {
    std::vector<MicroBatch> b;
    for (std::size_t i = 0; i < tokens.size(); ++i) b.push_back({tokens[i].data(), targets[i].data()});
    return b;
  }
};

Data random_data() {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> token(0, kModel.vocabulary - 1);
  Data d;
  for (int i = 0; i < kMicroBatches; ++i) {
    std::vector<int> x, y;
    for (int t = 0; t < kMicroBatch * kModel.sequence_length; ++t) x.push_back(token(rng)), y.push_back(token(rng));
    d.tokens.push_back(x);
    d.targets.push_back(y);
  }
  return d;
}

std::map<std::string, std::vector<double>> gradients(kernels::Backend& backend, Stage& stage) {
  std::vector<float> all(stage.parameter_count());
  backend.download(all.data(), stage.grads(), all.size());
  std::map<std::string, std::vector<double>> by_name;
  for (const auto& v : stage.parameters()) by_name[v.name].assign(all.begin() + v.offset, all.begin() + v.offset + v.count);
  return by_name;
}

struct PipelineCase {
  plan::Schedule schedule;
  std::vector<int> layer_cuts;  // first layer of each stage, then the layer count
  ActivationStorage storage = ActivationStorage::fp32;
};

std::string case_name(const PipelineCase& c) {
  std::string name = plan::to_string(c.schedule) + "_cuts";
  for (int cut : c.layer_cuts) name += "_" + std::to_string(cut);
  return name + "_" + to_string(c.storage);
}
void PrintTo(const PipelineCase& c, std::ostream* out) { *out << case_name(c); }

class Pipeline : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(Pipeline, EqualsOneStageAccumulatingTheMicroBatches) {
  const PipelineCase c = GetParam();
  const int p = static_cast<int>(c.layer_cuts.size()) - 1;
  const Data data = random_data();
  const float scale = 1.0f / (kMicroBatches * kMicroBatch * kModel.sequence_length);

  // Reference: the whole model, micro-batches one after the other.
  auto reference_backend = kernels::make_cpu_backend();
  Stage whole(kModel, StageSpec::whole(kModel), *reference_backend, kMicroBatch, 1, nullptr, c.storage);
  whole.initialize(5);
  whole.zero_grads();
  double reference_loss = 0;
  for (int i = 0; i < kMicroBatches; ++i) {
    reference_loss += whole.forward(0, data.tokens[i].data(), nullptr, data.targets[i].data());
    whole.backward(0, nullptr, scale);
  }
  const auto expected = gradients(*reference_backend, whole);

  // The pipeline: one thread, backend and stage per pipeline stage.
  Mailbox box;
  std::vector<std::unique_ptr<kernels::Backend>> backends;
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<std::unique_ptr<PipelineStep>> steps;
  for (int s = 0; s < p; ++s) {
    backends.push_back(kernels::make_cpu_backend());
    const StageSpec spec{c.layer_cuts[s], c.layer_cuts[s + 1], s == 0, s == p - 1};
    stages.push_back(std::make_unique<Stage>(kModel, spec, *backends[s], kMicroBatch,
                                             activation_slots(c.schedule, kMicroBatches, p), nullptr, c.storage));
    stages[s]->initialize(5);
    stages[s]->zero_grads();
    steps.push_back(std::make_unique<PipelineStep>(*stages[s], *backends[s], c.schedule, s, p, kMicroBatches));
  }
  std::vector<double> losses(p, 0.0);
  std::vector<std::string> errors(p);
  std::vector<std::thread> threads;
  for (int s = 0; s < p; ++s) {
    threads.emplace_back([&, s] {
      try {
        MailboxLinks links(box, s);
        losses[s] = steps[s]->run(data.batches(), links, scale);
      } catch (const std::exception& e) {
        errors[s] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < p; ++s) ASSERT_EQ(errors[s], "") << "stage " << s;

  EXPECT_NEAR(losses[p - 1], reference_loss, 1e-6 * reference_loss);
  std::map<std::string, std::vector<double>> summed;  // wte: embedding part + tied head part
  for (int s = 0; s < p; ++s) {
    for (auto& [name, values] : gradients(*backends[s], *stages[s])) {
      auto& total = summed[name];
      total.resize(values.size(), 0.0);
      for (std::size_t i = 0; i < values.size(); ++i) total[i] += values[i];
    }
  }
  ASSERT_EQ(summed.size(), expected.size());
  for (const auto& [name, want] : expected) {
    double largest = 0;
    for (double w : want) largest = std::max(largest, std::abs(w));
    const auto& got = summed.at(name);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5 * largest + 1e-9) << name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, Pipeline,
    ::testing::Values(PipelineCase{plan::Schedule::gpipe, {0, 2, 4}}, PipelineCase{plan::Schedule::one_f_one_b, {0, 2, 4}},
                      PipelineCase{plan::Schedule::gpipe, {0, 1, 2, 3, 4}},
                      PipelineCase{plan::Schedule::one_f_one_b, {0, 1, 2, 3, 4}},
                      // uneven stages: 3 layers, then 1 (pipeline.layers_per_stage)
                      PipelineCase{plan::Schedule::one_f_one_b, {0, 3, 4}},
                      PipelineCase{plan::Schedule::gpipe, {0, 1, 2, 3, 4}, ActivationStorage::bf16},
                      PipelineCase{plan::Schedule::one_f_one_b, {0, 3, 4}, ActivationStorage::bf16},
                      // stages without layers: the embedding alone, the head alone
                      PipelineCase{plan::Schedule::gpipe, {0, 0, 2, 4, 4}, ActivationStorage::bf16}),
    [](const ::testing::TestParamInfo<PipelineCase>& info) { return case_name(info.param); });

}  // namespace
}  // namespace geotrain::runtime
