// What the checkpoint's checksums cost its writers
// (analysis/results/checkpoint-checksums.md): the same tensors (a parameter
// with its two AdamW moments per tensor) written and flushed to disk, in
// turns, four ways:
//   plain      contiguous datasets, no checksum (format version 1's layout),
//              through the HDF5 API directly;
//   fletcher32 io::write_checkpoint_file: chunks of 2^18 floats with HDF5's
//              Fletcher32 filter (the single, sharded and weights-only forms);
//   crc32      plain plus zlib's CRC-32 of every tensor as an attribute (what
//              the collective writer of the parallel and per_site forms adds).
//   read       io::read_checkpoint_file of the fletcher32 file (verifying).
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

// One group of contiguous datasets, each with a crc32 attribute if asked.
void write_plain_group(hid_t file, const char* group_name, const Checkpoint& c, int which, bool crc) {
  const hid_t group = H5Gcreate2(file, group_name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (const CheckpointTensor& t : c.tensors) {
    const std::vector<float>& v = which == 0 ? t.value : which == 1 ? t.first_moment : t.second_moment;
    const hsize_t dims[2] = {static_cast<hsize_t>(t.shape[0]), static_cast<hsize_t>(t.shape[1])};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t set = H5Dcreate2(group, t.name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    if (crc) {
      const std::int64_t sum = static_cast<std::int64_t>(
          crc32_z(0L, reinterpret_cast<const Bytef*>(v.data()), v.size() * sizeof(float)));
      const hid_t scalar = H5Screate(H5S_SCALAR);
      const hid_t attribute = H5Acreate2(set, "crc32", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(attribute, H5T_NATIVE_INT64, &sum);
      H5Aclose(attribute), H5Sclose(scalar);
    }
    H5Dclose(set), H5Sclose(space);
  }
  H5Gclose(group);
}

void write_plain(const std::string& path, const Checkpoint& c, bool crc) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  write_plain_group(file, "params", c, 0, crc);
  const hid_t optimizer = H5Gcreate2(file, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(optimizer);
  write_plain_group(file, "optimizer/m", c, 1, crc);
  write_plain_group(file, "optimizer/v", c, 2, crc);
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
  const std::string plain = folder + "/plain.h5", fletcher = folder + "/fletcher32.h5", crc = folder + "/crc32.h5";
  std::vector<double> t_plain, t_fletcher, t_crc, t_read;
  const std::vector<std::function<void()>> ways = {
      [&] { t_plain.push_back(seconds_of([&] { write_plain(plain, c, false), fsync_file(plain); })); },
      [&] {
        t_fletcher.push_back(seconds_of([&] { geotrain::io::write_checkpoint_file(fletcher, c), fsync_file(fletcher); }));
      },
      [&] { t_crc.push_back(seconds_of([&] { write_plain(crc, c, true), fsync_file(crc); })); }};
  // In turns, each repeat starting with the next way: a busy moment of the
  // machine, or the first write's cold cache, falls on every way alike.
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t w = 0; w < ways.size(); ++w) ways[(w + static_cast<std::size_t>(r)) % ways.size()]();
    t_read.push_back(seconds_of([&] { geotrain::io::read_checkpoint_file(fletcher); }));
  }
  std::printf("%zu tensors x 3 (value, m, v): %.0f MB per file, %d repeats, median\n\n", c.tensors.size(), bytes / 1e6,
              repeats);
  std::printf("| way | seconds | MB/s | vs plain |\n|---|---:|---:|---:|\n");
  const double base = median(t_plain);
  for (const auto& [name, times] : {std::pair<const char*, std::vector<double>&>{"plain (no checksum)", t_plain},
                                    {"fletcher32 (io::write_checkpoint_file)", t_fletcher},
                                    {"crc32 attribute (collective writer's)", t_crc}}) {
    const double s = median(times);
    std::printf("| %s | %.3f | %.0f | %+.1f%% |\n", name, s, bytes / s / 1e6, 100.0 * (s - base) / base);
  }
  std::printf("| read + verify (io::read_checkpoint_file) | %.3f | %.0f | |\n", median(t_read),
              bytes / median(t_read) / 1e6);
  std::filesystem::remove_all(folder);
  return 0;
}
