// What the checkpoint's checksums cost its writers
// (analysis/results/checkpoint-checksums.md): the same tensors (a parameter
// with its two AdamW moments per tensor) written and flushed to disk, in
// turns, five ways:
//   plain      contiguous datasets, no checksum (format version 1's layout),
//              through the HDF5 API directly;
//   geotrain   io::write_checkpoint_file: plain plus the CRC-32 of every
//              tensor as an attribute (io::crc32_of_bytes, carry-less
//              multiplication), computed on a helper thread while the
//              datasets are written (every form since the checksums' cost was cut);
//   crc32      plain plus the same attributes computed before each write, on
//              the writing thread;
//   zlib crc32 the same by zlib's crc32 (the collective writer before);
//   fletcher32 chunks of 2^18 floats with HDF5's Fletcher32 filter (the
//              single-process forms of format version 2's first writers);
//   read       io::read_checkpoint_file of the geotrain file (verifying).
// Then the two CRC-32s alone over the same bytes in memory.
// Each write ends with fsync, as save_checkpoint does. Prints one table row
// per way: median seconds and MB/s over the repeats, and the overhead
// against plain.
//
// usage: bench_checkpoint_checksums [FOLDER] [MB of parameters] [repeats]
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/crc32.hpp"

namespace {

using geotrain::io::Checkpoint;
using geotrain::io::CheckpointTensor;

Checkpoint make_checkpoint(double megabytes) {
  Checkpoint c;
  c.model = {.name = "bench", .layers = 1, .hidden = 1024, .heads = 16, .vocabulary = 1024, .sequence_length = 64};
  const int tensors = std::max(1, static_cast<int>(megabytes / 4.0));  // [1024, 1024] floats: 4 MB each
  for (int i = 0; i < tensors; ++i) {
    CheckpointTensor t{"t" + std::to_string(i), {1024, 1024}, {}, {}, {}};
    for (auto* v : {&t.value, &t.first_moment, &t.second_moment}) {
      v->resize(1024 * 1024);
      for (std::size_t k = 0; k < v->size(); ++k) (*v)[k] = static_cast<float>((k * 2654435761u + i) % 1000003) * 1e-6f;
    }
    c.tensors.push_back(std::move(t));
  }
  return c;
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) ::fsync(fd), ::close(fd);
}

enum class Guard { none, crc32, zlib_crc32, fletcher32 };

// One group of datasets, each with a crc32 attribute or Fletcher32 chunks if asked.
void write_plain_group(hid_t file, const char* group_name, const Checkpoint& c, int which, Guard guard) {
  const hid_t group = H5Gcreate2(file, group_name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t layout = H5Pcreate(H5P_DATASET_CREATE);
  if (guard == Guard::fletcher32) {
    const hsize_t chunk[2] = {256, 1024};  // 2^18 floats
    H5Pset_chunk(layout, 2, chunk);
    H5Pset_fletcher32(layout);
  }
  const bool crc = guard == Guard::crc32 || guard == Guard::zlib_crc32;
  for (const CheckpointTensor& t : c.tensors) {
    const std::vector<float>& v = which == 0 ? t.value : which == 1 ? t.first_moment : t.second_moment;
    const hsize_t dims[2] = {static_cast<hsize_t>(t.shape[0]), static_cast<hsize_t>(t.shape[1])};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t set = H5Dcreate2(group, t.name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, layout, H5P_DEFAULT);
    H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    if (crc) {
      const std::int64_t sum = guard == Guard::crc32
                                   ? geotrain::io::crc32_of_bytes(v.data(), v.size() * sizeof(float))
                                   : static_cast<std::int64_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(v.data()),
                                                                       v.size() * sizeof(float)));
      const hid_t scalar = H5Screate(H5S_SCALAR);
      const hid_t attribute = H5Acreate2(set, "crc32", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(attribute, H5T_NATIVE_INT64, &sum);
      H5Aclose(attribute), H5Sclose(scalar);
    }
    H5Dclose(set), H5Sclose(space);
  }
  H5Pclose(layout), H5Gclose(group);
}

void write_plain(const std::string& path, const Checkpoint& c, Guard guard) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  write_plain_group(file, "params", c, 0, guard);
  const hid_t optimizer = H5Gcreate2(file, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(optimizer);
  write_plain_group(file, "optimizer/m", c, 1, guard);
  write_plain_group(file, "optimizer/v", c, 2, guard);
  H5Fclose(file);
}

double seconds_of(const std::function<void()>& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string folder = argc > 1 ? argv[1] : "build/bench-checksums";
  const double megabytes = argc > 2 ? std::atof(argv[2]) : 256.0;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  std::filesystem::create_directories(folder);
  const Checkpoint c = make_checkpoint(megabytes);
  const double bytes = 3.0 * static_cast<double>(c.tensors.size()) * 1024 * 1024 * sizeof(float);
  struct Way {
    const char* name;
    std::function<void(const std::string&)> write;
    std::vector<double> seconds;
  };
  std::vector<Way> ways = {
      {"plain (no checksum)", [&](const std::string& p) { write_plain(p, c, Guard::none); }, {}},
      {"geotrain: crc32 on a helper thread (io::write_checkpoint_file)",
       [&](const std::string& p) { geotrain::io::write_checkpoint_file(p, c); }, {}},
      {"crc32 on the writing thread", [&](const std::string& p) { write_plain(p, c, Guard::crc32); }, {}},
      {"zlib's crc32 on the writing thread", [&](const std::string& p) { write_plain(p, c, Guard::zlib_crc32); }, {}},
      {"fletcher32 chunks (HDF5 filter)", [&](const std::string& p) { write_plain(p, c, Guard::fletcher32); }, {}}};
  const std::string file_of_geotrain = folder + "/way1.h5";
  std::vector<double> t_read;
  // In turns, each repeat starting with the next way: a busy moment of the
  // machine, or the first write's cold cache, falls on every way alike.
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t w = 0; w < ways.size(); ++w) {
      const std::size_t k = (w + static_cast<std::size_t>(r)) % ways.size();
      const std::string path = folder + "/way" + std::to_string(k) + ".h5";
      ways[k].seconds.push_back(seconds_of([&] { ways[k].write(path), fsync_file(path); }));
    }
    t_read.push_back(seconds_of([&] { geotrain::io::read_checkpoint_file(file_of_geotrain); }));
  }
  std::printf("%zu tensors x 3 (value, m, v): %.0f MB per file, %d repeats, median\n\n", c.tensors.size(), bytes / 1e6,
              repeats);
  std::printf("| way | seconds | MB/s | vs plain |\n|---|---:|---:|---:|\n");
  const double base = median(ways[0].seconds);
  for (const Way& way : ways) {
    const double s = median(way.seconds);
    std::printf("| %s | %.3f | %.0f | %+.1f%% |\n", way.name, s, bytes / s / 1e6, 100.0 * (s - base) / base);
  }
  std::printf("| read + verify (io::read_checkpoint_file) | %.3f | %.0f | |\n", median(t_read),
              bytes / median(t_read) / 1e6);
  std::filesystem::remove_all(folder);
  for (const auto& [name, digest] : {std::pair<const char*, std::function<std::uint32_t(const void*, std::size_t)>>{
                                         "io::crc32_of_bytes", geotrain::io::crc32_of_bytes},
                                     {"zlib's crc32", geotrain::io::crc32_of_bytes_by_zlib}}) {
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      times.push_back(seconds_of([&] {
        for (const CheckpointTensor& t : c.tensors) {
          for (const auto* v : {&t.value, &t.first_moment, &t.second_moment}) digest(v->data(), v->size() * sizeof(float));
        }
      }));
    }
    std::printf("%s alone, in memory: %.3f s, %.1f GB/s\n", name, median(times), bytes / median(times) / 1e9);
  }
  return 0;
}
