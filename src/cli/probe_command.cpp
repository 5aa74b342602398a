// geotrain probe: measure the network between the ranks of an mpirun job and
// write it as a full-matrix scenario file (inputs/scenarios/README.md) that
// geotrain plan and simulate read.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <vector>

#include "geotrain/cli/commands.hpp"
#include "geotrain/io/scenario.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/mpi/mpi_probe.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/job/job_layout.hpp"

namespace geotrain::cli {

void add_probe_command(CLI::App& app, ProbeCommandOptions& o) {
  CLI::App* probe = app.add_subcommand(
      "probe", "Measure latency and bandwidth between all ranks (run under mpirun); write a scenario file");
  probe->add_option("--out", o.out, "scenario file to write (full-matrix form; rank 0 writes it)")->required();
  probe->add_option("--bytes", o.bytes, "bandwidth message size in bytes")->check(CLI::Range(1ll, 1ll << 30));
  probe->add_option("--repeats", o.repeats, "timed bandwidth messages per direction and pair")
      ->check(CLI::Range(1, 1000000));
  probe->add_option("--latency-repeats", o.latency_repeats, "timed small round trips per pair")
      ->check(CLI::Range(1, 1000000));
  probe->add_option("--deadline-s", o.deadline_s, "seconds any rank waits for a peer before aborting the job")
      ->check(CLI::Range(0.001, 1e6));
  probe->add_option("--device", o.device,
                    "measure each rank's compute speed (a GEMM) and memory on this backend and write them as "
                    "[device_types]; none: the network only")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "none"}));
  probe->add_option("--precision", o.precision, "the GEMM's precision (the training's device.matmul_precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
}

namespace {

std::string summary(const std::vector<double>& values, double scale, int precision) {
  std::vector<double> v = values;
  std::sort(v.begin(), v.end());
  std::ostringstream out;
  out << std::fixed << std::setprecision(precision) << v.front() * scale << " / " << v[v.size() / 2] * scale
      << " / " << v.back() * scale;
  return out.str();
}

// What the probe found, on rank 0's terminal.
void print_summary(const plan::Network& net, const std::vector<runtime::DeviceMeasurement>& devices, double seconds,
                   const ProbeCommandOptions& o) {
  std::vector<double> latency, bandwidth;
  for (int u = 0; u < net.device_count; ++u) {
    for (int v = 0; v < net.device_count; ++v) {
      if (u == v) continue;
      latency.push_back(net.latency(u, v));
      bandwidth.push_back(net.bandwidth(u, v));
    }
  }
  std::cout << "probed " << net.device_count << " ranks in " << std::fixed << std::setprecision(2) << seconds << " s\n";
  if (!latency.empty()) {
    std::cout << "  latency   min / median / max: " << summary(latency, 1e6, 1) << " us (one way)\n"
              << "  bandwidth min / median / max: " << summary(bandwidth, 1.0 / plan::kBytesPerGbit, 2)
              << " Gbit/s\n";
  }
  if (net.shared.nics == plan::NicSource::probed) {
    std::cout << "  NIC (fan-in) min / median / max: "
              << summary(net.shared.nic_bytes_per_s, 1.0 / plan::kBytesPerGbit, 2) << " Gbit/s\n";
  }
  std::vector<std::string> sites;
  for (const std::string& site : net.site_of_device) {
    if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(site);
  }
  std::cout << "  sites (by latency): " << sites.size() << "\n";
  for (const auto& [site, rate] : net.shared.site_uplink_bytes_per_s) {
    std::cout << "  uplink of " << site << ": " << std::setprecision(3) << rate / plan::kBytesPerGbit << " Gbit/s\n";
  }
  for (std::size_t r = 0; r < devices.size(); ++r) {
    const plan::DeviceType& type = net.device_types[static_cast<std::size_t>(net.type_of_device[r])];
    std::cout << "  rank " << r << ": " << std::setprecision(4) << devices[r].tflops << " TFLOPS (GEMM, " << o.precision
              << "), " << std::setprecision(1) << devices[r].memory_bytes / plan::kBytesPerGib << " GiB -> type "
              << type.name << "\n";
  }
}

}  // namespace

int run_probe_command(const ProbeCommandOptions& o) {
  runtime::MpiSession mpi(nullptr, nullptr);
  runtime::ProbeOptions options;
  options.large_bytes = o.bytes;
  options.bandwidth_repeats = o.repeats;
  options.latency_repeats = o.latency_repeats;
  options.deadline_s = o.deadline_s;
  const double start = MPI_Wtime();
  plan::Network net = runtime::probe_network(MPI_COMM_WORLD, options);
  const double seconds = MPI_Wtime() - start;
  std::vector<runtime::DeviceMeasurement> devices;
  if (o.device != "none") {
    std::unique_ptr<kernels::Backend> backend;
    try {
      DeviceRequest request = DeviceRequest::automatic;
      parse_device_request(o.device, &request);
      backend = kernels::make_backend(request);
    } catch (const std::exception& e) {
      runtime::abort_all(std::string("--device ") + o.device + ": " + e.what());
    }
    const MatmulPrecision precision = o.precision == "bf16" ? MatmulPrecision::bf16 : MatmulPrecision::fp32;
    devices = runtime::measure_devices(*backend, precision, 1.0, o.deadline_s);
    if (mpi.rank() == 0) runtime::set_measured_types(net, devices);
  }
  if (mpi.rank() != 0) return 0;

  std::ostringstream text;
  text << "[scenario]\n"
       << "name = \"probed-" << net.device_count << "\"\n"
       << "description = \"measured by geotrain probe: " << net.device_count << " ranks, " << o.bytes
       << "-byte bandwidth messages\"\n"
       << "source = \"geotrain probe\"\n\n"
       << io::network_to_toml(net);
  // Write atomically: a reader never sees half a file.
  const std::string tmp = o.out + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    file << text.str();
    file.close();
    if (!file) runtime::abort_all("cannot write " + tmp);
  }
  std::error_code error;
  std::filesystem::rename(tmp, o.out, error);
  if (error) runtime::abort_all("cannot rename " + tmp + " to " + o.out + ": " + error.message());

  print_summary(net, devices, seconds, o);
  std::cout << "wrote " << o.out << "\n";
  return 0;
}

}  // namespace geotrain::cli
