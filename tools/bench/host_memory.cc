// BalloonReportsFreeMemory and MeasureRefill: see host_memory.h.
#include "tools/bench/host_memory.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kvtier::bench {
namespace {

constexpr const char* kBalloonDeviceId = "0x0005";  // virtio device ID 5: the memory balloon
constexpr size_t kReportingFeatureBit = 5;          // VIRTIO_BALLOON_F_REPORTING

std::string FirstLine(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14), which older headers lack

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// One byte read from each base page of [p, p + bytes).
double ReadEachPageSeconds(const uint8_t* p, size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t off = 0; off < bytes; off += page) {
    (void)*reinterpret_cast<const volatile uint8_t*>(p + off);
  }
  return Seconds(t0);
}

double CopySeconds(uint8_t* dst, const uint8_t* src, size_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr size_t kStep = size_t{1} << 20;  // a restore's copies land in runs
  for (size_t off = 0; off < bytes; off += kStep) {
    memcpy(dst + off, src + off, std::min(kStep, bytes - off));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

bool BalloonReportsFreeMemory(const std::string& virtio_devices) {
  std::error_code ec;
  for (const auto& dev : std::filesystem::directory_iterator(virtio_devices, ec)) {
    if (FirstLine(dev.path() / "device") != kBalloonDeviceId) continue;
    // One character per feature bit, bit 0 first.
    const std::string features = FirstLine(dev.path() / "features");
    if (features.size() > kReportingFeatureBit && features[kReportingFeatureBit] == '1') {
      return true;
    }
  }
  return false;
}

RefillCost MeasureRefill(const uint8_t* src, size_t bytes, std::chrono::milliseconds wait) {
  RefillCost cost;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || bytes == 0) return cost;
  auto* dst = static_cast<uint8_t*>(p);
  memcpy(dst, src, bytes);  // memory new to the process, not timed
  constexpr double kGB = 1e9;
  if (madvise(dst, bytes, MADV_DONTNEED) == 0) {
    cost.fresh_gbs = static_cast<double>(bytes) / CopySeconds(dst, src, bytes) / kGB;
  }
  if (madvise(dst, bytes, MADV_DONTNEED) == 0) {
    std::this_thread::sleep_for(wait);  // the condition measured: memory that stayed free
    cost.later_gbs = static_cast<double>(bytes) / CopySeconds(dst, src, bytes) / kGB;
  }
  if (madvise(dst, bytes, MADV_DONTNEED) == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    if (madvise(dst, bytes, kPopulateWrite) == 0) {
      const double s = Seconds(t0);
      const size_t pages = bytes / static_cast<size_t>(sysconf(_SC_PAGESIZE));
      cost.populate_gbs = static_cast<double>(bytes) / s / kGB;
      cost.first_use_us = ReadEachPageSeconds(dst, bytes) / static_cast<double>(pages) * 1e6;
      cost.second_use_us = ReadEachPageSeconds(dst, bytes) / static_cast<double>(pages) * 1e6;
    }
  }
  munmap(dst, bytes);
  return cost;
}

}  // namespace kvtier::bench
