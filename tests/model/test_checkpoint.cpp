// Checkpoint files: round trip, the atomic directory protocol, and every
// kind of bad checkpoint rejected with the file and field named.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/hf_gpt2.hpp"
#include "support/scratch_dir.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/optimizer.hpp"
#include "geotrain/runtime/checkpointing.hpp"
#include "geotrain/runtime/site_groups.hpp"

namespace geotrain {
namespace {

namespace fs = std::filesystem;

// A one-layer model small enough to check tensor by tensor.
const ModelShape kTinyShape{.name = "t", .layers = 1, .hidden = 8, .heads = 2, .vocabulary = 8, .sequence_length = 4};

// The whole of kTinyShape as one stage, initialised from `seed`, with its
// optimizer (fresh moments).
struct TinyStage {
  TinyStage(kernels::Backend& backend, std::uint64_t seed)
      : stage(kTinyShape, model::StageSpec::whole(kTinyShape), backend, 1, 1),
        optimizer(backend, stage, model::OptimizerSettings{}) {
    stage.initialize(seed);
  }
  model::Stage stage;
  model::AdamW optimizer;
};

// Opens `path` with HDF5 directly (to damage or inspect what geotrain wrote).
void with_hdf5_file(const std::string& path, unsigned mode, const std::function<void(hid_t)>& use) {
  const hid_t file = H5Fopen(path.c_str(), mode, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  use(file);
  H5Fclose(file);
}

io::Checkpoint sample_checkpoint(int steps = 7) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  io::Checkpoint c;
  c.completed_steps = steps;
  c.global_batch_sequences = 16;
  c.sampler = {11, 2, 48};
  c.model = {.name = "t", .layers = 1, .hidden = 4, .heads = 2, .vocabulary = 8, .sequence_length = 4};
  c.config_text = "train.steps = 9\n";
  c.plan_text = "pipeline 0: ranks 0";
  for (auto [name, shape] : {std::pair<std::string, std::vector<int>>{"wte", {8, 4}}, {"h.0.ln1.bias", {4}}}) {
    io::CheckpointTensor t{name, shape, {}, {}, {}};
    const int n = shape.size() == 2 ? shape[0] * shape[1] : shape[0];
    for (int i = 0; i < n; ++i) {
      t.value.push_back(normal(rng)), t.first_moment.push_back(normal(rng)), t.second_moment.push_back(std::abs(normal(rng)));
    }
    c.tensors.push_back(t);
  }
  return c;
}

void expect_rejected(const std::string& path, const std::string& fragment) {
  try {
    io::read_checkpoint_file(path);
    FAIL() << "accepted " << path;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, FileRoundTripIsExact) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-roundtrip");
  const io::Checkpoint c = sample_checkpoint();
  io::write_checkpoint_file((dir / "a.h5").string(), c);
  const io::Checkpoint back = io::read_checkpoint_file((dir / "a.h5").string());
  EXPECT_EQ(back.completed_steps, 7);
  EXPECT_EQ(back.global_batch_sequences, 16);
  EXPECT_EQ(back.sampler, c.sampler);
  EXPECT_EQ(back.model.hidden, 4);
  EXPECT_EQ(back.config_text, c.config_text);
  EXPECT_EQ(back.plan_text, c.plan_text);
  ASSERT_EQ(back.tensors.size(), 2u);
  for (const auto& t : c.tensors) {
    const io::CheckpointTensor* b = back.find(t.name);
    ASSERT_NE(b, nullptr) << t.name;
    EXPECT_EQ(b->shape, t.shape);
    EXPECT_EQ(b->value, t.value);  // bitwise: float32 stored as float32
    EXPECT_EQ(b->first_moment, t.first_moment);
    EXPECT_EQ(b->second_moment, t.second_moment);
  }
}

TEST(Checkpoint, ErrorFeedbackResidualsRoundTripThroughFileAndMessage) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-residuals");
  io::Checkpoint c = sample_checkpoint();
  c.residual_layout = "int8 group_size=64 topk_fraction=0.010000 replicas=2";
  c.residuals.push_back({"layers_0-2.replica_1.shard_0", {3}, {0.5f, -1e-7f, 3.25f}, {}, {}});
  c.residuals.push_back({"layers_0-2.replica_1.owned", {1}, {-2.0f}, {}, {}});
  io::write_checkpoint_file((dir / "r.h5").string(), c);
  const io::Checkpoint back = io::read_checkpoint_file((dir / "r.h5").string());
  EXPECT_EQ(back.residual_layout, c.residual_layout);
  ASSERT_EQ(back.residuals.size(), 2u);  // HDF5 lists them by name: "owned" before "shard_0"
  EXPECT_EQ(back.residuals[0].name, "layers_0-2.replica_1.owned");
  EXPECT_EQ(back.residuals[0].value, std::vector<float>{-2.0f});
  EXPECT_EQ(back.residuals[1].value, c.residuals[0].value);
  EXPECT_EQ(back.tensors.size(), 2u);  // the parameters are untouched by them
  EXPECT_TRUE(io::read_checkpoint_file([&] {
                io::write_checkpoint_file((dir / "none.h5").string(), sample_checkpoint());
                return (dir / "none.h5").string();
              }()).residuals.empty());
  // Value-only tensors travel without moments; mixed with full ones.
  const std::vector<io::CheckpointTensor> mixed = {c.tensors[0], c.residuals[0]};
  const auto decoded = io::deserialize_tensors(io::serialize_tensors(mixed));
  ASSERT_EQ(decoded.size(), 2u);
  EXPECT_EQ(decoded[0].first_moment, c.tensors[0].first_moment);
  EXPECT_TRUE(decoded[1].first_moment.empty() && decoded[1].second_moment.empty());
  EXPECT_EQ(decoded[1].value, c.residuals[0].value);
  io::CheckpointTensor one_moment = c.residuals[0];
  one_moment.first_moment = one_moment.value;
  EXPECT_THROW(io::serialize_tensors({one_moment}), std::invalid_argument);
}

TEST(Checkpoint, SerializedTensorsRoundTripAndTruncationIsRejected) {
  const io::Checkpoint c = sample_checkpoint();
  std::vector<std::uint8_t> bytes = io::serialize_tensors(c.tensors);
  const auto back = io::deserialize_tensors(bytes);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].value, c.tensors[0].value);
  EXPECT_EQ(back[1].second_moment, c.tensors[1].second_moment);
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_THROW(io::deserialize_tensors(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + cut)),
                 std::invalid_argument) << cut;
  }
  bytes.push_back(0);
  EXPECT_THROW(io::deserialize_tensors(bytes), std::invalid_argument);
}

TEST(Checkpoint, DirectoryKeepsTheNewestAndLatestNamesAWholeFile) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-directory");
  for (int step : {10, 20, 30, 40}) io::save_checkpoint(dir.string(), sample_checkpoint(step), 2);
  EXPECT_FALSE(fs::exists(dir / "step_00000010.h5"));
  EXPECT_FALSE(fs::exists(dir / "step_00000020.h5"));
  EXPECT_TRUE(fs::exists(dir / "step_00000030.h5"));
  EXPECT_EQ(io::resolve_resume(dir.string(), "auto"), (dir / "step_00000040.h5").string());
  // A crash mid-write leaves a .tmp behind: `latest` still names step 40.
  std::ofstream(dir / "step_00000050.h5.tmp") << "half a file";
  EXPECT_EQ(io::read_checkpoint_file(io::resolve_resume(dir.string(), "auto")).completed_steps, 40);
  EXPECT_EQ(io::resolve_resume((dir / "empty").string(), "auto"), "");  // nothing yet: start fresh
  std::ofstream(dir / "latest") << "step_00000099.h5\n";
  EXPECT_THROW(io::resolve_resume(dir.string(), "auto"), InputError);
}

// The sharded form: each rank's part in its shard, the manifest last; read
// back whole by read_checkpoint from the folder or the manifest.
TEST(Checkpoint, ShardedFormRoundTripsAndOnlyTheManifestMakesItVisible) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-sharded");
  io::Checkpoint whole = sample_checkpoint(10);
  whole.residual_layout = "int8 group_size=64 topk_fraction=0.010000 replicas=2";
  io::Checkpoint part0 = whole, part3 = whole;
  part0.tensors = {whole.tensors[0]};
  part0.residuals = {{"layers_0-0.replica_0.shard_0", {2}, {1.0f, 2.0f}, {}, {}}};
  part3.tensors = {whole.tensors[1]};
  part3.residuals = {{"layers_0-0.replica_1.shard_0", {1}, {3.0f}, {}, {}}};
  const std::string shard3 = io::write_checkpoint_shard(dir.string(), part3, 3);
  io::write_checkpoint_shard(dir.string(), part0, 0);
  EXPECT_EQ(shard3, (dir / "step_00000010" / "rank_00003.h5").string());
  EXPECT_EQ(io::resolve_resume(dir.string(), "auto"), "");  // shards alone: not a checkpoint yet
  EXPECT_THROW(io::read_checkpoint((dir / "step_00000010").string()), InputError);  // no manifest
  io::Checkpoint metadata = whole;
  metadata.tensors.clear();
  const std::vector<std::string> shards = {io::shard_name(0), io::shard_name(3)};
  const std::string folder = io::publish_sharded_checkpoint(dir.string(), metadata, shards, 3, shards);
  EXPECT_EQ(io::resolve_resume(dir.string(), "auto"), folder);
  for (const std::string& path : {folder, folder + "/manifest.h5"}) {
    const io::Checkpoint back = io::read_checkpoint(path);
    EXPECT_EQ(back.completed_steps, 10);
    EXPECT_EQ(back.sampler, whole.sampler);
    EXPECT_EQ(back.config_text, whole.config_text);
    EXPECT_EQ(back.residual_layout, whole.residual_layout);
    ASSERT_EQ(back.tensors.size(), 2u);
    for (const auto& t : whole.tensors) {
      ASSERT_NE(back.find(t.name), nullptr) << t.name;
      EXPECT_EQ(back.find(t.name)->value, t.value);
      EXPECT_EQ(back.find(t.name)->second_moment, t.second_moment);
    }
    EXPECT_EQ(back.residuals.size(), 2u);
  }
  // A shard is not a checkpoint by itself.
  EXPECT_THROW(io::read_checkpoint_file(shard3), InputError);
}

TEST(Checkpoint, AMissingShardIsNamed) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-missing-shard");
  io::Checkpoint c = sample_checkpoint(4);
  io::write_checkpoint_shard(dir.string(), c, 0);
  io::Checkpoint metadata = c;
  metadata.tensors.clear();
  // Publishing with a shard that is not there (a folder not shared by every rank): RunError naming it.
  try {
    io::publish_sharded_checkpoint(dir.string(), metadata, {io::shard_name(0), io::shard_name(1)}, 3,
                                   {io::shard_name(0), io::shard_name(1)});
    FAIL() << "published without rank 1's shard";
  } catch (const RunError& e) {
    EXPECT_NE(std::string(e.what()).find("step_00000004/rank_00001.h5: missing"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "latest"));
  const std::string folder = io::publish_sharded_checkpoint(dir.string(), metadata, {io::shard_name(0)}, 3, {io::shard_name(0)});
  fs::remove(fs::path(folder) / "rank_00000.h5");
  try {
    io::read_checkpoint(folder);
    FAIL() << "read without its shard";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(folder + "/rank_00000.h5: missing", 0), 0u) << e.what();
  }
}

TEST(Checkpoint, AFileWrittenDurablyReplacesTheOldOneWholeAndLeavesNoTemporary) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-durable-file");
  const std::string path = (dir / "shard.h5").string();
  const std::vector<std::uint8_t> first{1, 2, 3}, second{9, 8, 7, 6, 5};
  io::write_file_durably(path, first);
  io::write_file_durably(path, second);
  std::ifstream in(path, std::ios::binary);
  const std::vector<std::uint8_t> read((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(read, second);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // A folder that does not exist: RunError naming the file, nothing left behind.
  const std::string unreachable = (dir / "absent" / "shard.h5").string();
  try {
    io::write_file_durably(unreachable, first);
    FAIL() << "wrote into a missing folder";
  } catch (const RunError& e) {
    EXPECT_NE(std::string(e.what()).find(unreachable + ".tmp"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, PruningKeepsTheNewestOfBothFormsAndDropsOldIncompleteFolders) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-prune");
  io::save_checkpoint(dir.string(), sample_checkpoint(10), 2);
  fs::create_directories(dir / "step_00000015");  // a killed run's shards, never published
  std::ofstream(dir / "step_00000015" / "rank_00000.h5") << "half";
  fs::create_directories(dir / "step_00000099");  // newer: maybe being written; left alone
  io::Checkpoint c = sample_checkpoint(20);
  io::write_checkpoint_shard(dir.string(), c, 0);
  c.tensors.clear();
  io::publish_sharded_checkpoint(dir.string(), c, {io::shard_name(0)}, 2, {io::shard_name(0)});
  EXPECT_TRUE(fs::exists(dir / "step_00000010.h5"));
  EXPECT_FALSE(fs::exists(dir / "step_00000015"));
  EXPECT_TRUE(fs::exists(dir / "step_00000099"));
  io::save_checkpoint(dir.string(), sample_checkpoint(30), 2);
  EXPECT_FALSE(fs::exists(dir / "step_00000010.h5"));
  EXPECT_TRUE(fs::exists(dir / "step_00000020" / "manifest.h5"));
  EXPECT_EQ(io::resolve_resume(dir.string(), "auto"), (dir / "step_00000030.h5").string());
  std::ofstream(dir / "latest") << "step_00000099\n";  // a folder without its manifest
  EXPECT_THROW(io::resolve_resume(dir.string(), "auto"), InputError);
}

// The one-rank sink writes in the background: save() returns before the
// file is there; finish() waits, and reports a failed write naming the file.
TEST(Checkpoint, LocalSinkWritesInTheBackgroundAndReportsFailuresAtFinish) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-sink");
  for (const bool sharded : {false, true}) {
    const fs::path here = dir / (sharded ? "sharded" : "single");
    runtime::LocalCheckpointSink sink(here.string(), 2, sharded);
    EXPECT_EQ(sink.finish(), "");  // nothing in flight
    io::Checkpoint c = sample_checkpoint(5);
    std::vector<io::CheckpointTensor> tensors = std::move(c.tensors);
    c.tensors.clear();
    sink.save(c, tensors);
    const std::string path = sink.finish();
    EXPECT_FALSE(sink.writing());
    EXPECT_EQ(path, (here / (sharded ? "step_00000005" : "step_00000005.h5")).string());
    EXPECT_EQ(io::resolve_resume(here.string(), "auto"), path);
    EXPECT_EQ(io::read_checkpoint(path).tensors.size(), 2u);
    // The next step's temporary file cannot be created: reported at finish().
    const fs::path blocked = sharded ? here / "step_00000006" / "rank_00000.h5.tmp" : here / "step_00000006.h5.tmp";
    fs::create_directories(blocked);
    c.completed_steps = 6;
    sink.save(c, tensors);
    try {
      sink.finish();
      FAIL() << "the failed write was not reported";
    } catch (const RunError& e) {
      EXPECT_NE(std::string(e.what()).find("checkpoint not written: " + blocked.string()), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(io::resolve_resume(here.string(), "auto"), path);  // `latest` still names step 5
  }
}

TEST(Checkpoint, BadFilesAreRejectedNamingFileAndField) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-bad");
  const std::string good = (dir / "good.h5").string();
  io::write_checkpoint_file(good, sample_checkpoint());

  expect_rejected((dir / "missing.h5").string(), "cannot open");
  const std::string random = (dir / "random.h5").string();
  {
    std::ofstream out(random, std::ios::binary);
    std::mt19937 rng(5);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>(rng()));
  }
  expect_rejected(random, "not an HDF5 file");
  const std::string truncated = (dir / "truncated.h5").string();
  fs::copy_file(good, truncated);
  fs::resize_file(truncated, fs::file_size(good) / 2);
  try {
    io::read_checkpoint_file(truncated);
    FAIL() << "a truncated checkpoint was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(truncated), std::string::npos) << e.what();
  }

  io::Checkpoint future = sample_checkpoint();
  future.format_version = 3;
  const std::string version = (dir / "version.h5").string();
  io::write_checkpoint_file(version, future);
  expect_rejected(version, "format_version: 3 is not supported");

  const std::string no_moment = (dir / "no-moment.h5").string();
  fs::copy_file(good, no_moment);
  with_hdf5_file(no_moment, H5F_ACC_RDWR, [](hid_t file) { ASSERT_GE(H5Ldelete(file, "/optimizer/m/wte", H5P_DEFAULT), 0); });
  expect_rejected(no_moment, "/optimizer/m/wte: missing");
}

TEST(Checkpoint, RestoreRefusesAnotherModel) {
  auto backend = kernels::make_cpu_backend();
  TinyStage tiny(*backend, 1);
  auto& [stage, optimizer] = tiny;
  io::Checkpoint other = sample_checkpoint();  // hidden 4
  try {
    runtime::restore_tensors(stage, optimizer, *backend, other, "x.h5");
    FAIL() << "restored a checkpoint of another model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("x.h5: attribute model_hidden: the checkpoint has 4"), std::string::npos)
        << e.what();
  }
  // Same shape, a tensor missing: named.
  io::Checkpoint same;
  same.model = kTinyShape;
  for (auto& t : runtime::collect_tensors(stage, optimizer, *backend, false)) {
    if (t.name != "lnf.bias") same.tensors.push_back(t);
  }
  EXPECT_THROW(runtime::restore_tensors(stage, optimizer, *backend, same, "y.h5"), InputError);
}

// On the CPU a checkpoint may borrow the live parameters and moments (no
// snapshot): the tensors point into them, and write what a copy would.
TEST(Checkpoint, BorrowedTensorsPointAtTheLiveStateAndWriteTheSame) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-borrowed");
  auto backend = kernels::make_cpu_backend();
  TinyStage tiny(*backend, 3);
  auto& [stage, optimizer] = tiny;
  const auto copies = runtime::collect_tensors(stage, optimizer, *backend, false);
  const auto borrowed = runtime::collect_tensors(stage, optimizer, *backend, false, true);
  ASSERT_EQ(copies.size(), borrowed.size());
  for (std::size_t i = 0; i < copies.size(); ++i) {
    EXPECT_TRUE(borrowed[i].value.empty());
    EXPECT_GE(borrowed[i].borrowed_value, stage.params());
    EXPECT_LT(borrowed[i].borrowed_value, stage.params() + stage.parameter_count());
    const auto same = [](std::span<const float> a, std::span<const float> b) {
      return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
    };
    EXPECT_TRUE(same(borrowed[i].values(), copies[i].values())) << copies[i].name;
    EXPECT_TRUE(same(borrowed[i].second_moments(), copies[i].second_moments())) << copies[i].name;
  }
  io::Checkpoint c;
  c.model = kTinyShape;
  c.tensors = borrowed;
  const std::string path = (dir / "borrowed.h5").string();
  io::write_checkpoint_file(path, c);
  const io::Checkpoint back = io::read_checkpoint_file(path);
  for (const io::CheckpointTensor& t : copies) {
    const io::CheckpointTensor* read = back.find(t.name);
    ASSERT_NE(read, nullptr) << t.name;
    EXPECT_EQ(read->value, t.value) << t.name;
    EXPECT_EQ(read->first_moment, t.first_moment) << t.name;
  }
  // The single form's gather sends them the same way.
  EXPECT_EQ(io::serialize_tensors(borrowed), io::serialize_tensors(copies));
}

// Asynchronous checkpoints that read the live state let the optimizer go on
// as soon as the writer has read every tensor, before the fsync: the
// callback comes once, after the bytes are in the temporary file (changing
// the tensors then changes nothing written) and before the file is renamed.
TEST(Checkpoint, TensorsAreGivenBackOnceTheirBytesAreInTheFileBeforeItIsDurable) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-given-back");
  for (const bool sharded : {false, true}) {
    const io::Checkpoint owned = sample_checkpoint(sharded ? 8 : 9);
    std::vector<std::vector<float>> live;  // what the optimizer would change
    io::Checkpoint lent = owned;
    for (io::CheckpointTensor& t : lent.tensors) {
      for (std::vector<float>* part : {&t.value, &t.first_moment, &t.second_moment}) live.push_back(std::move(*part));
      t.value.clear(), t.first_moment.clear(), t.second_moment.clear();
    }
    for (std::size_t i = 0; i < lent.tensors.size(); ++i) {
      lent.tensors[i].borrowed_value = live[3 * i].data();
      lent.tensors[i].borrowed_first_moment = live[3 * i + 1].data();
      lent.tensors[i].borrowed_second_moment = live[3 * i + 2].data();
    }
    const fs::path final_path = sharded ? dir / "step_00000008" / "rank_00002.h5" : dir / "step_00000009.h5";
    int calls = 0;
    auto given_back = [&] {
      ++calls;
      EXPECT_TRUE(fs::exists(final_path.string() + ".tmp")) << final_path;
      EXPECT_FALSE(fs::exists(final_path)) << final_path;
      for (std::vector<float>& values : live) std::fill(values.begin(), values.end(), -7.0f);
    };
    const std::string path = sharded ? io::write_checkpoint_shard(dir.string(), lent, 2, given_back)
                                     : io::save_checkpoint(dir.string(), lent, 2, given_back);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(path, final_path.string());
    // Read as HDF5 datasets, also the shard (no manifest yet).
    for (const io::CheckpointTensor& t : owned.tensors) {
      for (const auto& [group, expected] : {std::pair{std::string("params/"), &t.value},
                                            std::pair{std::string("optimizer/m/"), &t.first_moment},
                                            std::pair{std::string("optimizer/v/"), &t.second_moment}}) {
        with_hdf5_file(path, H5F_ACC_RDONLY, [&](hid_t file) {
          const hid_t dataset = H5Dopen2(file, (group + t.name).c_str(), H5P_DEFAULT);
          ASSERT_GE(dataset, 0) << group << t.name;
          std::vector<float> read(expected->size());
          EXPECT_GE(H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, read.data()), 0);
          H5Dclose(dataset);
          EXPECT_EQ(read, *expected) << group << t.name;
        });
      }
    }
  }
}

// A converted model: /params only, marked weights_only; it starts a run
// (restore_weights) but is refused where moments are needed.
TEST(Checkpoint, WeightsOnlyFilesHaveNoOptimizerAndCannotBeResumed) {
  const fs::path dir = geotrain::testing::scratch_dir("checkpoint-weights-only");
  auto backend = kernels::make_cpu_backend();
  TinyStage tiny(*backend, 5);
  auto& [source, source_optimizer] = tiny;
  io::Checkpoint c;
  c.model = kTinyShape;
  c.weights_only = true;
  for (io::CheckpointTensor& t : runtime::collect_tensors(source, source_optimizer, *backend, false)) {
    t.first_moment.clear(), t.second_moment.clear();
    c.tensors.push_back(std::move(t));
  }
  const std::string path = (dir / "weights.h5").string();
  io::write_checkpoint_file(path, c);
  with_hdf5_file(path, H5F_ACC_RDONLY, [](hid_t file) { EXPECT_EQ(H5Lexists(file, "optimizer", H5P_DEFAULT), 0); });
  const io::Checkpoint back = io::read_checkpoint_file(path);
  EXPECT_TRUE(back.weights_only);
  ASSERT_EQ(back.tensors.size(), c.tensors.size());
  EXPECT_TRUE(back.tensors[0].first_moment.empty());

  TinyStage target(*backend, 9);
  auto& [stage, optimizer] = target;
  try {
    runtime::restore_tensors(stage, optimizer, *backend, back, path);
    FAIL() << "resumed a weights-only file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": attribute weights_only: no optimizer state to resume (use "
                                         "checkpoint.init_from)"),
              std::string::npos)
        << e.what();
  }
  runtime::restore_weights(stage, *backend, back, path);
  std::vector<float> want(source.parameter_count()), got(stage.parameter_count());
  backend->download(want.data(), source.params(), want.size());
  backend->download(got.data(), stage.params(), got.size());
  EXPECT_EQ(got, want);
}

// The converter's table of geotrain names (io, which cannot see the model
// library) is the model's own parameter layout.
TEST(Checkpoint, HuggingFaceNameTableIsTheModelsLayout) {
  const ModelShape shape{.name = "t", .layers = 3, .hidden = 8, .heads = 2, .vocabulary = 11, .sequence_length = 5};
  const auto layout = model::parameter_layout(shape, model::StageSpec::whole(shape));
  const auto names = io::hf_gpt2_tensor_names(shape);
  ASSERT_EQ(names.size(), layout.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(names[i].geotrain, layout[i].name);
    EXPECT_EQ(names[i].shape, layout[i].shape) << layout[i].name;
  }
}


// The message with which resolve_checkpoint_form refuses `form` on these
// premises; "" (and a failure) if it accepts it.
std::string refusal(CheckpointForm form, const runtime::CheckpointPremises& premises) {
  try {
    const CheckpointForm got = runtime::resolve_checkpoint_form(form, premises);
    ADD_FAILURE() << to_string(form) << " accepted as " << to_string(got);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// checkpoint.form against what the ranks share, worked by hand: every
// premise that decides, and an error naming the field where a form cannot work.
TEST(Checkpoint, FormFollowsWhatTheRanksShare) {
  using runtime::CheckpointPremises;
  using runtime::resolve_checkpoint_form;
  const CheckpointPremises alone;  // one rank
  EXPECT_EQ(resolve_checkpoint_form(CheckpointForm::automatic, alone), CheckpointForm::single);
  EXPECT_EQ(resolve_checkpoint_form(CheckpointForm::parallel, alone), CheckpointForm::single);
  EXPECT_EQ(resolve_checkpoint_form(CheckpointForm::per_site, alone), CheckpointForm::sharded);

  CheckpointPremises shared{4, true, true, true, ""};
  EXPECT_EQ(resolve_checkpoint_form(CheckpointForm::automatic, shared), CheckpointForm::parallel);
  CheckpointPremises serial = shared;
  serial.parallel_io = false;
  EXPECT_EQ(resolve_checkpoint_form(CheckpointForm::automatic, serial), CheckpointForm::sharded);
  for (CheckpointForm form : {CheckpointForm::parallel, CheckpointForm::per_site}) {
    EXPECT_EQ(refusal(form, serial).rfind("checkpoint.form = " + to_string(form) + ": needs parallel HDF5", 0), 0u);
  }

  CheckpointPremises per_site_folders{4, false, true, true, "training ranks 2, 3 do not see every rank's files in ck"};
  EXPECT_EQ(resolve_checkpoint_form(CheckpointForm::automatic, per_site_folders), CheckpointForm::per_site);
  EXPECT_EQ(resolve_checkpoint_form(CheckpointForm::single, per_site_folders), CheckpointForm::single);
  for (CheckpointForm form : {CheckpointForm::parallel, CheckpointForm::sharded}) {
    const std::string message = refusal(form, per_site_folders);
    EXPECT_EQ(message.rfind("checkpoint.form = " + to_string(form) + ": checkpoint.dir must be one folder", 0), 0u)
        << message;
    EXPECT_NE(message.find("training ranks 2, 3"), std::string::npos) << message;
  }
  CheckpointPremises per_rank_folders = per_site_folders;
  per_rank_folders.sites_share_folder = false;
  EXPECT_THROW(resolve_checkpoint_form(CheckpointForm::automatic, per_rank_folders), InputError);
  EXPECT_THROW(resolve_checkpoint_form(CheckpointForm::per_site, per_rank_folders), InputError);
  per_site_folders.parallel_io = false;
  EXPECT_THROW(resolve_checkpoint_form(CheckpointForm::automatic, per_site_folders), InputError);
}

TEST(Checkpoint, SitesAreNumberedByTheirFirstMember) {
  const runtime::SiteGroups g = runtime::group_by_site({"Tokyo", "Oregon", "Tokyo", "London", "Oregon"});
  EXPECT_EQ(g.names, (std::vector<std::string>{"Tokyo", "Oregon", "London"}));
  EXPECT_EQ(g.first_member, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(g.site_of_member, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(g.members_with(4), (std::vector<int>{1, 4}));
  EXPECT_EQ(g.members_with(3), (std::vector<int>{3}));
}

TEST(Checkpoint, SiteShardNamesAreFileSafe) {
  EXPECT_EQ(io::site_shard_name(2, "london"), "site_02_london.h5");
  EXPECT_EQ(io::site_shard_name(0, "eu/west 1"), "site_00_eu_west_1.h5");
  EXPECT_EQ(io::site_shard_name(11, ""), "site_11_unnamed.h5");
}

}  // namespace
}  // namespace geotrain
