// Checkpoint checksums: every tensor dataset of every form carries one
// (checked here through HDF5's and zlib's own APIs, not geotrain's), and a
// byte flipped in any of them stops the reader naming the file and tensor.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/crc32.hpp"
#include "support/scratch_dir.hpp"

namespace geotrain {
namespace {

namespace fs = std::filesystem;

// A tensor of 600 x 1000 floats (three chunks of 2^18 floats, where chunked).
io::Checkpoint checkpoint_with_large_tensor() {
  io::Checkpoint c;
  c.completed_steps = 3;
  c.model = {.name = "t", .layers = 1, .hidden = 4, .heads = 2, .vocabulary = 8, .sequence_length = 4};
  c.config_text = "train.steps = 3\n";
  c.plan_text = "one rank";
  for (auto [name, shape] : {std::pair<std::string, std::vector<int>>{"wte", {600, 1000}}, {"lnf.bias", {4}}}) {
    io::CheckpointTensor t{name, shape, {}, {}, {}};
    const std::size_t n = io::element_count(shape);
    for (std::size_t i = 0; i < n; ++i) {
      t.value.push_back(0.001f * static_cast<float>(i % 977));
      t.first_moment.push_back(-0.5f + 1e-6f * static_cast<float>(i));
      t.second_moment.push_back(1e-4f * static_cast<float>(i % 13 + 1));
    }
    c.tensors.push_back(t);
  }
  c.residual_layout = "int8 replicas=2";
  c.residuals.push_back({"layers_0-1.replica_1.owned", {5}, {0.5f, -1.0f, 2.0f, 3.0f, 4.0f}, {}, {}});
  return c;
}

// Every dataset below the tensor groups of `file`, as "/group/name".
std::vector<std::string> tensor_datasets(const std::string& path) {
  std::vector<std::string> found;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* out) -> herr_t {
    if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
    return 0;
  };
  H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, visit, &found);
  H5Fclose(file);
  return found;
}

// What guards a dataset, read through HDF5's API: the Fletcher32 filter,
// the crc32 attribute, and where its bytes lie (the one block of a
// contiguous dataset, or each chunk).
struct Storage {
  bool fletcher32 = false;
  bool has_crc32 = false;
  std::int64_t crc32 = 0;
  std::uint32_t zlib_crc32 = 0;                      // of the bytes as stored, by zlib
  std::vector<std::pair<haddr_t, hsize_t>> blocks;  // file offset and size
};

Storage storage_of(const std::string& path, const std::string& dataset) {
  Storage s;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t set = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  const hid_t properties = H5Dget_create_plist(set);
  for (int i = 0; i < H5Pget_nfilters(properties); ++i) {
    unsigned flags = 0;
    std::size_t count = 0;
    s.fletcher32 |= H5Pget_filter2(properties, static_cast<unsigned>(i), &flags, &count, nullptr, 0, nullptr, nullptr) ==
                    H5Z_FILTER_FLETCHER32;
  }
  s.has_crc32 = H5Aexists(set, "crc32") > 0;
  if (s.has_crc32) {
    const hid_t attribute = H5Aopen(set, "crc32", H5P_DEFAULT);
    H5Aread(attribute, H5T_NATIVE_INT64, &s.crc32);
    H5Aclose(attribute);
  }
  const hid_t space = H5Dget_space(set);
  std::vector<float> values(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
  H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  s.zlib_crc32 = static_cast<std::uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(values.data()), static_cast<uInt>(values.size() * sizeof(float))));
  hsize_t chunks = 0;
  if (H5Pget_layout(properties) == H5D_CHUNKED && H5Dget_num_chunks(set, space, &chunks) >= 0) {
    for (hsize_t i = 0; i < chunks; ++i) {
      unsigned mask = 0;
      haddr_t at = 0;
      hsize_t size = 0;
      H5Dget_chunk_info(set, space, i, nullptr, &mask, &at, &size);
      s.blocks.push_back({at, size});
    }
  } else if (H5Pget_layout(properties) == H5D_CONTIGUOUS) {
    s.blocks.push_back({H5Dget_offset(set), H5Dget_storage_size(set)});
  }
  H5Sclose(space);
  H5Pclose(properties);
  H5Dclose(set);
  H5Fclose(file);
  return s;
}

void flip_byte(const std::string& path, haddr_t at) {
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  std::fseek(f, static_cast<long>(at), SEEK_SET);
  const int byte = std::fgetc(f);
  std::fseek(f, static_cast<long>(at), SEEK_SET);
  std::fputc(byte ^ 0x10, f);
  std::fclose(f);
}

void expect_damage_named(const std::function<void()>& read, const std::string& file, const std::string& dataset) {
  try {
    read();
    FAIL() << "a flipped byte in " << file << ": " << dataset << " was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file + ": " + dataset + ": damaged"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(CheckpointChecksums, EveryTensorOfEveryFormCarriesZlibsCrc32OfItsBytes) {
  const fs::path dir = geotrain::testing::scratch_dir("checksum-forms");
  io::Checkpoint c = checkpoint_with_large_tensor();
  const std::string single = io::save_checkpoint(dir.string(), c, 2);
  const std::string shard = io::write_checkpoint_shard((dir / "sharded").string(), c, 0);
  io::Checkpoint weights = c;
  weights.weights_only = true;
  weights.residuals.clear();
  for (auto& t : weights.tensors) t.first_moment.clear(), t.second_moment.clear();
  const std::string weights_path = (dir / "weights.h5").string();
  io::write_checkpoint_file(weights_path, weights);
  for (const auto& [path, count] : {std::pair{single, 7u}, {shard, 7u}, {weights_path, 2u}}) {
    const std::vector<std::string> datasets = tensor_datasets(path);
    EXPECT_EQ(datasets.size(), count) << path;
    for (const std::string& d : datasets) {
      const Storage s = storage_of(path, d);
      EXPECT_TRUE(s.has_crc32) << path << ": " << d;
      EXPECT_EQ(s.crc32, static_cast<std::int64_t>(s.zlib_crc32)) << path << ": " << d;
      EXPECT_EQ(s.blocks.size(), 1u) << path << ": " << d;  // contiguous: one block to flip a byte in
    }
  }
}

TEST(CheckpointChecksums, AFlippedByteInAnyTensorIsCaughtNamingFileAndTensor) {
  const fs::path dir = geotrain::testing::scratch_dir("checksum-flips");
  const std::string good = (dir / "good.h5").string();
  io::write_checkpoint_file(good, checkpoint_with_large_tensor());
  ASSERT_NO_THROW(io::read_checkpoint_file(good));
  int cases = 0;
  for (const std::string& dataset : tensor_datasets(good)) {
    const Storage s = storage_of(good, dataset);
    ASSERT_FALSE(s.blocks.empty()) << dataset;
    for (hsize_t at : {hsize_t{0}, s.blocks[0].second / 2, s.blocks[0].second - 1}) {  // first, middle, last byte
      const std::string damaged = (dir / ("damaged-" + std::to_string(cases++) + ".h5")).string();
      fs::copy_file(good, damaged);
      flip_byte(damaged, s.blocks[0].first + at);
      expect_damage_named([&] { io::read_checkpoint_file(damaged); }, damaged, dataset);
    }
  }
  EXPECT_EQ(cases, 3 * 7);  // wte and lnf.bias with 2 moments each, 1 residual; 3 places each

  // The sharded form: a shard's damage is named by the shard's path.
  const fs::path folder_root = dir / "sharded";
  io::Checkpoint c = checkpoint_with_large_tensor();
  io::Checkpoint first = c, second = c;
  first.tensors.resize(1), first.residuals.clear();
  second.tensors.erase(second.tensors.begin());
  const std::string shard0 = io::write_checkpoint_shard(folder_root.string(), first, 0);
  io::write_checkpoint_shard(folder_root.string(), second, 1);
  const std::string folder = io::publish_sharded_checkpoint(folder_root.string(), c, {io::shard_name(0), io::shard_name(1)},
                                                            2, {io::shard_name(0), io::shard_name(1)});
  ASSERT_NO_THROW(io::read_checkpoint(folder));
  const Storage s = storage_of(shard0, "/optimizer/v/wte");
  flip_byte(shard0, s.blocks.back().first + s.blocks.back().second - 7);
  expect_damage_named([&] { io::read_checkpoint(folder); }, shard0, "/optimizer/v/wte");
}

// The fast CRC-32 (carry-less multiplication) equals zlib's on every length
// around its block sizes, at every alignment, and on large buffers; a
// single flipped bit anywhere changes it.
TEST(Crc32, EqualsZlibAtEveryLengthAndAlignment) {
  std::mt19937 random(7);
  std::vector<unsigned char> bytes(1 << 20);
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(random());
  for (std::size_t offset = 0; offset < 16; ++offset) {
    for (std::size_t count = 0; count <= 300; ++count) {
      ASSERT_EQ(io::crc32_of_bytes(bytes.data() + offset, count), io::crc32_of_bytes_by_zlib(bytes.data() + offset, count))
          << "offset " << offset << ", " << count << " bytes";
    }
  }
  for (std::size_t count : {std::size_t{4096}, std::size_t{65536 + 13}, bytes.size() - 5, bytes.size()}) {
    EXPECT_EQ(io::crc32_of_bytes(bytes.data(), count), io::crc32_of_bytes_by_zlib(bytes.data(), count)) << count;
  }
  const std::uint32_t whole = io::crc32_of_bytes(bytes.data(), bytes.size());
  for (std::size_t at : {std::size_t{0}, std::size_t{63}, std::size_t{64}, bytes.size() / 2, bytes.size() - 1}) {
    bytes[at] ^= 0x20;
    EXPECT_NE(io::crc32_of_bytes(bytes.data(), bytes.size()), whole) << "bit flipped at byte " << at;
    bytes[at] ^= 0x20;
  }
  const char check[] = "123456789";  // the CRC-32 check value of the standard (ISO-HDLC)
  std::vector<unsigned char> repeated;
  for (int i = 0; i < 10; ++i) repeated.insert(repeated.end(), check, check + 9);
  EXPECT_EQ(io::crc32_of_bytes(check, 9), 0xCBF43926u);
  EXPECT_EQ(io::crc32_of_bytes(repeated.data(), repeated.size()), io::crc32_of_bytes_by_zlib(repeated.data(), repeated.size()));
}

// Format version 2's first writers guarded the files one process wrote with
// HDF5's Fletcher32 filter on chunks: such files still load, verified.
TEST(CheckpointChecksums, Fletcher32ChunksOfEarlierFilesAreStillVerified) {
  const fs::path dir = geotrain::testing::scratch_dir("checksum-fletcher");
  const std::string path = (dir / "fletcher32.h5").string();
  io::write_checkpoint_file(path, checkpoint_with_large_tensor());
  std::vector<float> values(600 * 1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 31);
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(file, "/params/wte", H5P_DEFAULT), 0);
    const hsize_t dims[2] = {600, 1000}, chunk[2] = {262, 1000};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t layout = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(layout, 2, chunk);
    H5Pset_fletcher32(layout);
    const hid_t set = H5Dcreate2(file, "/params/wte", H5T_IEEE_F32LE, space, H5P_DEFAULT, layout, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    H5Dclose(set), H5Pclose(layout), H5Sclose(space), H5Fclose(file);
  }
  EXPECT_EQ(io::read_checkpoint_file(path).find("wte")->value, values);
  const Storage s = storage_of(path, "/params/wte");
  ASSERT_TRUE(s.fletcher32);
  ASSERT_EQ(s.blocks.size(), 3u);  // 600 rows in chunks of 262
  for (std::size_t chunk = 0; chunk < s.blocks.size(); ++chunk) {
    const std::string damaged = (dir / ("damaged-" + std::to_string(chunk) + ".h5")).string();
    fs::copy_file(path, damaged);
    flip_byte(damaged, s.blocks[chunk].first + s.blocks[chunk].second / 2);
    expect_damage_named([&] { io::read_checkpoint_file(damaged); }, damaged, "/params/wte");
  }
}

// Replaces /params/lnf.bias of `path` with a contiguous, unfiltered dataset
// of `values`, with an attribute crc32 = `crc` unless it is negative.
void replace_without_filter(const std::string& path, const std::vector<float>& values, std::int64_t crc) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(H5Ldelete(file, "/params/lnf.bias", H5P_DEFAULT), 0);
  const hsize_t dims[1] = {values.size()};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t set = H5Dcreate2(file, "/params/lnf.bias", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  if (crc >= 0) {
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t attribute = H5Acreate2(set, "crc32", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attribute, H5T_NATIVE_INT64, &crc);
    H5Aclose(attribute);
    H5Sclose(scalar);
  }
  H5Dclose(set);
  H5Sclose(space);
  H5Fclose(file);
}

TEST(CheckpointChecksums, ACrc32AttributeIsVerifiedAndATensorWithNoChecksumIsRefused) {
  const fs::path dir = geotrain::testing::scratch_dir("checksum-crc");
  const std::string good = (dir / "good.h5").string();
  io::write_checkpoint_file(good, checkpoint_with_large_tensor());
  const std::vector<float> values = {1.0f, -2.0f, 0.25f, 8.0f};
  const auto crc = static_cast<std::int64_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(values.data()), static_cast<uInt>(values.size() * sizeof(float))));

  const std::string with_crc = (dir / "crc.h5").string();  // as the collective writer stores it
  fs::copy_file(good, with_crc);
  replace_without_filter(with_crc, values, crc);
  EXPECT_EQ(io::read_checkpoint_file(with_crc).find("lnf.bias")->value, values);

  const std::string wrong_crc = (dir / "wrong-crc.h5").string();
  fs::copy_file(good, wrong_crc);
  replace_without_filter(wrong_crc, {1.0f, -2.0f, 0.25f, 8.5f}, crc);
  expect_damage_named([&] { io::read_checkpoint_file(wrong_crc); }, wrong_crc, "/params/lnf.bias");

  const std::string none = (dir / "none.h5").string();
  fs::copy_file(good, none);
  replace_without_filter(none, values, -1);
  try {
    io::read_checkpoint_file(none);
    FAIL() << "a tensor without a checksum was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(none + ": /params/lnf.bias: no checksum"), std::string::npos) << e.what();
  }
}

// Files written before checksums (format version 1) still load, unverified
// (a user's older checkpoints stay usable); an unknown version is refused.
TEST(CheckpointChecksums, VersionOneFilesAreReadUnverifiedAndUnknownVersionsRefused) {
  const fs::path dir = geotrain::testing::scratch_dir("checksum-version");
  io::Checkpoint old = checkpoint_with_large_tensor();
  old.format_version = 1;
  const std::string path = (dir / "old.h5").string();
  io::write_checkpoint_file(path, old);
  const std::vector<float> values = {1.0f, -2.0f, 0.25f, 8.0f};
  replace_without_filter(path, values, -1);  // as version 1 stored it: no filter, no crc32
  EXPECT_EQ(io::read_checkpoint_file(path).find("lnf.bias")->value, values);

  io::Checkpoint future = checkpoint_with_large_tensor();
  future.format_version = 3;
  const std::string newer = (dir / "newer.h5").string();
  io::write_checkpoint_file(newer, future);
  try {
    io::read_checkpoint_file(newer);
    FAIL() << "a version 3 file was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(newer + ": attribute format_version: 3 is not supported"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace geotrain
