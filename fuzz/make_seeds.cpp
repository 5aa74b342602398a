// Writes the binary seeds of fuzz/corpus/ with geotrain's own writers, so
// that they stay valid when a format changes:
//   geotrain_fuzz_seeds fuzz/corpus
// The text seeds (configs, scenarios, model files) are copies of inputs/
// plus hand-written damaged variants; they need no generator.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/plan/plan_codec.hpp"

namespace {

namespace fs = std::filesystem;

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void token_shards(const fs::path& dir) {
  const std::vector<std::vector<std::uint16_t>> shards = {
      {0}, {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}, {65535, 0, 50256, 1}};
  for (std::size_t i = 0; i < shards.size(); ++i) {
    geotrain::io::write_token_shard((dir / ("valid-" + std::to_string(i) + ".bin")).string(), shards[i]);
  }
  // The refusals with their own messages: version 2 (uint32 tokens) and a big-endian header.
  std::vector<std::uint8_t> shard = read_bytes(dir / "valid-1.bin");
  shard[4] = 2;
  write_bytes(dir / "version-2.bin", shard);
  shard = read_bytes(dir / "valid-1.bin");
  for (int field = 0; field < 3; ++field) std::swap(shard[4 * field], shard[4 * field + 3]), std::swap(shard[4 * field + 1], shard[4 * field + 2]);
  write_bytes(dir / "big-endian.bin", shard);
}

geotrain::plan::Plan plan(int pp, int dp, bool boundaries) {
  geotrain::plan::Plan p;
  p.pipeline_stages = pp;
  p.data_parallel = dp;
  int device = pp * dp;
  for (int s = 0; s < pp; ++s) {
    p.stages.emplace_back();
    for (int r = 0; r < dp; ++r) p.stages.back().push_back(--device);
  }
  if (boundaries) {
    for (int b = 0; b + 1 < pp; ++b) p.boundary_s.push_back(0.5 * (b + 1));
  }
  p.cost.datap_s = 1.25;
  p.cost.pipeline_s = 0.0;
  return p;
}

void plan_messages(const fs::path& dir) {
  write_bytes(dir / "1x1.plan", geotrain::plan::encode_plan(plan(1, 1, false)));
  write_bytes(dir / "2x2.plan", geotrain::plan::encode_plan(plan(2, 2, true)));
  write_bytes(dir / "4x2-no-boundaries.plan", geotrain::plan::encode_plan(plan(4, 2, false)));
  write_bytes(dir / "3x5.plan", geotrain::plan::encode_plan(plan(3, 5, true)));
  // Tensor parallel 2: units 0..3 of two devices each, unit u = {2u + 1, 2u}.
  geotrain::plan::Plan tp = plan(2, 2, true);
  tp.tensor_parallel = 2;
  for (int u = 0; u < 4; ++u) tp.tensor_groups.push_back({2 * u + 1, 2 * u});
  write_bytes(dir / "2x2-tp2.plan", geotrain::plan::encode_plan(tp));
}

void tensor_messages(const fs::path& dir) {
  geotrain::io::CheckpointTensor wte{"wte", {4, 2}, {}, {}, {}};
  geotrain::io::CheckpointTensor bias{"h.0.ln_1.bias", {3}, {}, {}, {}};
  for (auto* t : {&wte, &bias}) {
    std::size_t n = 1;
    for (int d : t->shape) n *= static_cast<std::size_t>(d);
    for (std::size_t i = 0; i < n; ++i) {
      t->value.push_back(static_cast<float>(i));
      t->first_moment.push_back(0.5f);
      t->second_moment.push_back(0.25f);
    }
  }
  write_bytes(dir / "none.tensors", geotrain::io::serialize_tensors({}));
  write_bytes(dir / "one.tensors", geotrain::io::serialize_tensors({bias}));
  write_bytes(dir / "two.tensors", geotrain::io::serialize_tensors({wte, bias}));
  const geotrain::io::CheckpointTensor residual{"layers_0-2.replica_1.shard_0", {3}, {0.5f, -0.25f, 0.0f}, {}, {}};
  write_bytes(dir / "residual.tensors", geotrain::io::serialize_tensors({bias, residual}));
}

// The checkpoint harness reads its input as a list of edit choices; a few
// patterns start it on each kind of edit.
void checkpoint_edit_lists(const fs::path& dir) {
  write_bytes(dir / "no-edits", {0});
  for (std::uint8_t kind = 0; kind < 4; ++kind) {
    std::vector<std::uint8_t> edits = {1, kind};
    for (std::uint8_t b = 0; b < 24; ++b) edits.push_back(static_cast<std::uint8_t>(b * 37 + kind));
    write_bytes(dir / ("edit-" + std::to_string(kind)), edits);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  for (const char* name : {"token_shard", "plan_codec", "checkpoint_tensors", "checkpoint", "checkpoint_folder"}) {
    fs::create_directories(corpus / name);
  }
  token_shards(corpus / "token_shard");
  plan_messages(corpus / "plan_codec");
  tensor_messages(corpus / "checkpoint_tensors");
  checkpoint_edit_lists(corpus / "checkpoint");
  checkpoint_edit_lists(corpus / "checkpoint_folder");  // the same bytes choose the folder's edits
  return 0;
}
