// kvtier-bench calibrate: measures the figures of the multiround cost model
// that this machine can show and writes a profile. It starts from a base
// profile (tools/profiles/*.json) and replaces each field it measures, value
// and source, so the result loads with --profile like any other:
//   SSD      ssd_write_bps and ssd_read_bps (a raw io_uring O_DIRECT loop in
//            --dir, 2 MiB requests, queue depth 8, median of 3 passes),
//            ssd_latency_ns (median single 4 KiB read: the per-request setup
//            the model adds to each transfer), ssd_bytes (free space in --dir)
//   host     host_memory_bytes (physical memory)
//   GPU      gpu_memory_bytes, host_link_bps (managed-memory prefetch to
//            the device), fault_migration_bps (a kernel faulting every
//            64 KiB of a host-resident buffer in) and fault_batch_latency_ns
//            (one fault, against the same touch of a resident page), where a
//            CUDA driver and device answer; and, printed beside what the
//            model assumes but not in the profile, prefetch per 2 MiB and per
//            64 KiB call and as one scattered batch, a copy from pinned
//            memory, and a decode-like kernel's slowdown beside prefetches.
// The GPU's FLOP/s and the engine figures keep the base profile's values
// and sources. Thread-safety: single-threaded tool.
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <string>
#include <vector>

#include "runtime/units.h"
#include "tools/bench/bench_args.h"
#include "tools/bench/calibrate.h"
#include "tools/bench/hw_profile.h"
#include "tools/bench/spill_bench.h"

namespace kvtier::bench {
namespace {

const char kUsage[] =
    "usage: kvtier-bench calibrate [--base PROFILE] [--name NAME] [--out FILE] [--dir D]\n"
    "                              [--size 1G] [--gpu auto|on|off] [--gpu-size 1G]\n"
    "Measures this machine's SSD (in D), host memory and, where a CUDA device answers, GPU\n"
    "memory, prefetch bandwidth and fault-driven migration; writes the --base profile\n"
    "(h200-pcie5) with those fields replaced to FILE (default: stdout), for `multiround\n"
    "--profile FILE`, and prints the GPU figures the profile has no field for beside what\n"
    "the model assumes. --size is the SSD test file (2 MiB requests); --gpu-size the managed\n"
    "buffer prefetched (at most a quarter of the GPU's free memory, less 512 MiB for the\n"
    "other buffers). --gpu on fails when no GPU answers.\n";

struct CalibrateArgs {
  std::string base = "h200-pcie5";
  std::string name;
  std::string out;
  spill::Args ssd;
  std::string gpu = "auto";
  uint64_t gpu_bytes = uint64_t{1} << 30;
};

// Parses the options into *a: true to run on; false with *exit_code set
// (0 after --help, 2 after an error).
bool ParseArgs(int argc, char** argv, CalibrateArgs* a, int* exit_code) {
  a->ssd.size = uint64_t{1} << 30;
  a->ssd.rounds = 3;
  a->ssd.samples = 64;
  const uint64_t min_size = 16 * a->ssd.page;
  Flags flags("calibrate");
  flags.Text("--base", &a->base)
      .Text("--name", &a->name)
      .Text("--out", &a->out)
      .Text("--dir", &a->ssd.dir)
      .Size("--size", &a->ssd.size, min_size)
      .Size("--gpu-size", &a->gpu_bytes, min_size)
      .Choice("--gpu", &a->gpu, {"auto", "on", "off"});
  if (!flags.ParseOrExit(argc, argv, kUsage, exit_code)) return false;
  // Whole requests of the SSD test (2 MiB each).
  a->ssd.size = a->ssd.size / a->ssd.page * a->ssd.page;
  a->gpu_bytes = a->gpu_bytes / a->ssd.page * a->ssd.page;
  return true;
}

std::string HostName() {
  char host[256] = "this machine";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "this machine");
  return host;
}

std::string Today() {
  char day[32] = "";
  time_t now = time(nullptr);
  struct tm tm;
  if (localtime_r(&now, &tm) != nullptr) strftime(day, sizeof day, "%Y-%m-%d", &tm);
  return day;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One measured field: where it lives in the profile, what was measured and
// how.
struct Measured {
  const char* field;
  double* slot;
  double value;
  std::string how;
};

// The SSD figures from the raw O_DIRECT loop of `kvtier-bench spill`.
Status MeasureSsd(const spill::Args& a, HardwareProfile* p, std::vector<Measured>* out) {
  Env* env = Env::Default();
  if (Status st = env->CreateDir(a.dir); !st.ok()) return st.Annotate("--dir");
  std::vector<uint8_t> pattern(a.qd * a.page);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= pattern.size(); i += 8) {
    uint64_t v = spill::NextRandom(&rng);
    memcpy(pattern.data() + i, &v, 8);
  }
  std::vector<double> write_bps, read_bps, one_read_s;
  std::string how;
  uint64_t pick = 17;
  const size_t pages = a.size / a.page;
  for (int round = 0; round < a.rounds; ++round) {
    Result<std::unique_ptr<spill::Target>> t = spill::OpenRawTarget(a, env, pattern.data(), false);
    if (!t.ok()) return t.status().Annotate("SSD test file in " + a.dir);
    how = t.value()->how();
    Result<double> w = t.value()->WriteAll();
    Result<double> r = w.ok() ? t.value()->ReadAll() : w;
    if (!r.ok()) return r.status().Annotate("SSD test in " + a.dir);
    write_bps.push_back(static_cast<double>(a.size) / w.value());
    read_bps.push_back(static_cast<double>(a.size) / r.value());
    for (int s = 0; s < a.samples; ++s) {
      Result<double> one = t.value()->ReadOne(spill::NextRandom(&pick) % pages);
      if (!one.ok()) return one.status().Annotate("SSD test in " + a.dir);
      one_read_s.push_back(one.value());
    }
  }
  struct statvfs fs;
  if (statvfs(a.dir.c_str(), &fs) != 0) return Status::Errorf("statvfs(%s) failed", a.dir.c_str());
  const std::string where = a.dir + " (" + how + ", " + FormatBytes(a.page) +
                            " requests, queue depth " + std::to_string(a.qd) + ", " +
                            FormatBytes(a.size) + " file)";
  // The model charges each request a setup latency plus its bytes at the
  // throughput; the setup is what a 4 KiB read costs (written first: an
  // unwritten extent reads back as zeros without touching the device).
  spill::Args small = a;
  small.page = kDirectAlign;
  small.size = uint64_t{16} << 20;
  std::vector<double> small_read_s;
  Result<std::unique_ptr<spill::Target>> t4k =
      spill::OpenRawTarget(small, env, pattern.data(), false);
  Result<double> filled = t4k.ok() ? t4k.value()->WriteAll() : Result<double>(t4k.status());
  if (!filled.ok()) return filled.status().Annotate("4 KiB read test in " + a.dir);
  for (int s = 0; s < 4 * a.samples; ++s) {
    Result<double> one = t4k.value()->ReadOne(spill::NextRandom(&pick) % (small.size / small.page));
    if (!one.ok()) return one.status().Annotate("4 KiB read test in " + a.dir);
    small_read_s.push_back(one.value());
  }
  out->push_back({"ssd_write_bps", &p->ssd_write_bps, Median(write_bps),
                  "median of " + std::to_string(a.rounds) + " write passes in " + where});
  out->push_back({"ssd_read_bps", &p->ssd_read_bps, Median(read_bps),
                  "median of " + std::to_string(a.rounds) + " read passes in " + where});
  out->push_back({"ssd_latency_ns", &p->ssd_latency_ns, Median(small_read_s) * 1e9,
                  "median of " + std::to_string(small_read_s.size()) +
                      " single 4 KiB O_DIRECT reads at random offsets of a written 16 MiB file "
                      "in " +
                      a.dir + " (a single " + FormatBytes(a.page) + " read: median " +
                      std::to_string(Median(one_read_s) * 1e3).substr(0, 5) + " ms)"});
  out->push_back({"ssd_bytes", &p->ssd_bytes,
                  static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize),
                  "free space in " + a.dir});
  return Status::Ok();
}

// The GPU figures the profile has no field for, each beside what the model
// assumes (its profile figure), as "gpu-check:" lines scripts/gpu-check
// collects.
void PrintGpuAnswers(FILE* out, const GpuFigures& g, const HardwareProfile& model) {
  const double link = model.host_link_bps / 1e9;
  auto gbs = [](double bps) { return bps > 0 ? std::to_string(bps / 1e9).substr(0, 5) : "-"; };
  fprintf(out,
          "gpu-check: prefetch host->device on %s: one call for %s %s GB/s, a call per 2 MiB %s "
          "GB/s, a call per 64 KiB %s GB/s, every other 64 KiB in one %s %s GB/s; pinned "
          "cudaMemcpyAsync %s GB/s (the model moves every page at host_link_bps %.1f GB/s)\n",
          g.device.c_str(), FormatBytes(g.prefetch_bytes).c_str(), gbs(g.prefetch_bps).c_str(),
          gbs(g.prefetch_2m_bps).c_str(), gbs(g.prefetch_64k_bps).c_str(),
          g.batch_call ? "cuMemPrefetchBatchAsync" : "call per range (no batch call)",
          gbs(g.prefetch_batch_bps).c_str(), gbs(g.pinned_copy_bps).c_str(), link);
  fprintf(out,
          "gpu-check: fault-driven migration %s GB/s (model: fault_migration_bps %.1f GB/s); one "
          "fault %.1f us (model: fault_batch_latency_ns %.1f us per 2 MiB block)\n",
          gbs(g.fault_bps).c_str(), model.fault_migration_bps / 1e9, g.fault_latency_ns / 1e3,
          model.fault_batch_latency_ns / 1e3);
  if (g.decode_alone_ms > 0) {
    fprintf(out,
            "gpu-check: a decode-like kernel reading 256 MiB takes %.3f ms alone and %.3f ms "
            "beside prefetches on the backend's low-priority stream: %.2fx (the model charges "
            "decode nothing for concurrent moves)\n",
            g.decode_alone_ms, g.decode_beside_ms, g.decode_beside_ms / g.decode_alone_ms);
  }
  for (const std::string& why : g.skipped)
    fprintf(out, "gpu-check: not measured: %s\n", why.c_str());
}

}  // namespace

int RunCalibrateBench(int argc, char** argv) {
  CalibrateArgs a;
  int exit_code = 0;
  if (!ParseArgs(argc, argv, &a, &exit_code)) return exit_code;
  Result<HardwareProfile> base = LoadProfile(a.base, DefaultProfileDir());
  if (!base.ok()) {
    fprintf(stderr, "kvtier-bench calibrate: --base: %s\n", base.status().message().c_str());
    return 2;
  }
  HardwareProfile p = base.value();
  const std::string host = HostName();
  std::vector<Measured> measured;
  fprintf(stderr, "kvtier-bench calibrate: SSD in %s (%s file, %d passes)...\n", a.ssd.dir.c_str(),
          FormatBytes(a.ssd.size).c_str(), a.ssd.rounds);
  if (Status st = MeasureSsd(a.ssd, &p, &measured); !st.ok()) {
    fprintf(stderr, "kvtier-bench calibrate: %s\n", st.message().c_str());
    return 1;
  }
  const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  measured.push_back({"host_memory_bytes", &p.host_memory_bytes, phys, "physical memory"});

  std::string gpu_note = "--gpu off";
  GpuFigures gpu_figures;
  if (a.gpu != "off") {
    GpuFigures g = MeasureGpu(a.gpu_bytes);
    gpu_note = g.note;
    if (!g.measured && a.gpu == "on") {
      fprintf(stderr, "kvtier-bench calibrate: --gpu on: %s\n", g.note.c_str());
      return 1;
    }
    if (g.measured) {
      measured.push_back({"gpu_memory_bytes", &p.gpu_memory_bytes, g.memory_bytes,
                          "total memory of " + g.device + " (cuMemGetInfo)"});
      measured.push_back({"host_link_bps", &p.host_link_bps, g.prefetch_bps,
                          "median of 3 managed-memory prefetches of " +
                              FormatBytes(g.prefetch_bytes) + " host to " + g.device +
                              " (cuMemPrefetchAsync)"});
      measured.push_back({"fault_migration_bps", &p.fault_migration_bps, g.fault_bps,
                          "a kernel on " + g.device +
                              " touching every 64 KiB of a 256 MiB host-resident managed "
                              "buffer: bytes over the kernel's time"});
      measured.push_back({"fault_batch_latency_ns", &p.fault_batch_latency_ns, g.fault_latency_ns,
                          "median one-thread touch of a host-resident 2 MiB block on " + g.device +
                              " less the same touch once resident (32 blocks)"});
    }
    gpu_figures = g;
  }

  // The table goes to stderr when the profile itself goes to stdout.
  FILE* report = a.out.empty() ? stderr : stdout;
  const std::string stamp = "measured by kvtier-bench calibrate on " + host + ", " + Today() + ": ";
  fprintf(report, "%-20s %16s %16s %7s\n", "field", a.base.c_str(), "measured", "ratio");
  for (Measured& m : measured) {
    if (!std::isfinite(m.value) || m.value <= 0) {
      // A timing too short to measure, say: the base's figure stays.
      fprintf(report, "%-20s %16.4g %16s %7s   (no usable measurement; kept)\n", m.field, *m.slot,
              "-", "-");
      continue;
    }
    fprintf(report, "%-20s %16.4g %16.4g %7.2f\n", m.field, *m.slot, m.value,
            *m.slot > 0 ? m.value / *m.slot : 0.0);
    *m.slot = m.value;
    p.sources[m.field] = stamp + m.how;
  }
  fprintf(report,
          "GPU: %s\nother fields keep %s's values and sources (FLOP/s and the engine "
          "figures are not measured here)\n",
          gpu_note.c_str(), a.base.c_str());
  if (gpu_figures.measured) PrintGpuAnswers(report, gpu_figures, base.value());
  p.name = a.name.empty() ? host + "-calibrated" : a.name;
  p.description = "measured on " + host + " by kvtier-bench calibrate (" + Today() +
                  "); unmeasured fields from " + base.value().name + ": " +
                  base.value().description;
  const std::string json = ProfileJson(p);
  if (a.out.empty()) {
    fputs(json.c_str(), stdout);
    return 0;
  }
  FILE* f = fopen(a.out.c_str(), "w");
  bool written = f != nullptr && fputs(json.c_str(), f) >= 0;
  if (f != nullptr && fclose(f) != 0) written = false;
  if (!written) {
    fprintf(stderr, "kvtier-bench calibrate: --out %s: cannot write: %s\n", a.out.c_str(),
            strerror(errno));
    return 1;
  }
  printf("wrote %s (use: kvtier-bench multiround --profile %s)\n", a.out.c_str(), a.out.c_str());
  return 0;
}

}  // namespace kvtier::bench
