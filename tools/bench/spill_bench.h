// Internal to `kvtier-bench spill` (spill_bench.cc, spill_targets.cc,
// spill_faults.cc): its options, the targets it measures and its extra
// phases. Thread-safety: single-threaded tool.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/device.h"
#include "runtime/status.h"
#include "runtime/storage/env.h"
#include "runtime/storage/page_cipher.h"

namespace kvtier::bench::spill {

constexpr double kGB = 1e9;

struct Args {
  std::string dir = "/var/tmp/kvtier-bench";
  uint64_t size = uint64_t{1} << 30;
  uint64_t page = uint64_t{2} << 20;
  unsigned qd = 8;  // kvtier-bench spill: the store's DefaultQueueDepth unless --qd
  int samples = 200;
  int rounds = 3;
  bool faults = true;
  bool fio = true;
  bool device = true;           // the simulated GPU phases
  std::string cuda = "auto";    // the CUDA backend's phase: auto, gpu, host (stand-in) or off
  std::string cipher = "auto";  // the sealed stores' KVTIER_DISK_CIPHER
  bool check = false;
  uint64_t seed = 1;
};

// The sealed stores' cipher (--cipher, in KVTIER_DISK_CIPHER's words).
CipherLib StoreCipher(const Args& a);

double Now();                          // seconds, monotonic
uint64_t NextRandom(uint64_t* state);  // xorshift64*

// One thing measured: a raw file or a spill store. Every round runs the
// targets phase by phase (all writes, all reads, then single-page reads
// sample by sample), so noise from other work on the machine hits them alike.
class Target {
 public:
  virtual ~Target() = default;
  virtual Result<double> WriteAll() = 0;  // seconds for every page
  virtual Result<double> ReadAll() = 0;
  virtual Result<double> ReadOne(size_t page) = 0;
  virtual std::string how() const = 0;  // the I/O path, for the header line
};

// The raw baseline: one preallocated O_DIRECT file (as the store's file is,
// and as fio does), io_uring at the same depth, registered huge-page buffers.
// With `from_source`, writes come straight from the source pages instead
// (unregistered, like the store's zero-copy writes): that separates what the
// source memory costs from what the store costs.
Result<std::unique_ptr<Target>> OpenRawTarget(const Args& a, Env* env, const uint8_t* src,
                                              bool from_source);

// The spill store's real path: a SpillBatch at the same depth spills every
// page of src and restores into dst (checked byte for byte, untimed); a
// single-page restore is SpillStore::Read into a private page buffer, as the
// fault path does it. The store seals every page (AES-256-GCM, the
// default); `clear` turns that off (KVTIER_DISK_ENCRYPT=0) to show its cost.
Result<std::unique_ptr<Target>> OpenStoreTarget(const Args& a, Env* env, bool clear,
                                                const uint8_t* src, uint8_t* dst);

// The store over FaultEnv with every fault kind at once; prints what was
// injected and counted, and returns whether nothing was lost.
bool RunFaultPhase(const Args& a, const uint8_t* src, uint8_t* dst);

// Spills `pages` pages of `region` from one thread in groups of `group`
// through Device::SpillPages, as the policy tick does; the first error.
Status SpillInGroups(Device& device, Region& region, size_t pages, size_t group);

// A restore's baseline: the raw file read whole right before and right
// after the timed restore, so that it meets the disk of that moment (this
// virtual disk's speed drifts by 2x within a minute). Call Read() on each
// side; gbs() is both reads' bytes over their time.
class RawBeside {
 public:
  RawBeside(Target* raw, size_t bytes) : raw_(raw), bytes_(bytes) {}
  Status Read();
  double gbs() const;

 private:
  Target* raw_;
  size_t bytes_;
  int reads_ = 0;
  double seconds_ = 0;
};

// The simulated GPU's engine and fault threads: --qd, at most 8.
inline unsigned DeviceThreads(const Args& a) { return std::clamp(a.qd, 1u, 8u); }

// The simulated GPU's path: a sim region of --size spilled through
// Device::Spill by DeviceThreads threads at once, restored by as many engine
// threads touching every page (faults, with as many fault threads), and --samples
// single touches of spilled pages by one engine thread, timed per touch;
// --rounds times. Every page is compared with src at the end.
struct DeviceResult {
  std::vector<double> spill_gbs, restore_gbs;  // per round
  std::vector<double> restore_raw_gbs;         // per round: RawBeside
  std::vector<double> fault_ms;                // per timed touch
  std::vector<double> raw_ms;                  // a raw read right after each timed touch
  int fault_threads = 0;
  size_t pages = 0, device_pages = 0, wrong_pages = 0;
  uint64_t restored = 0, faults = 0, checksum_mismatches = 0;
  std::string io_mode;
  // RunReturnPhase: restores into a device that holds the region, the
  // process's CPU time per GB restored, and how the pages came back.
  std::vector<double> return_gbs, return_cpu_s_per_gb;  // per round
  std::vector<double> return_raw_gbs;                   // per round: RawBeside
  uint64_t return_faults = 0, return_ahead = 0;
  double install_gbs = 0;  // InstallOneCoreGbs
};
// `raw` (a written raw target) gives a single-page read after each timed
// touch, so the fault-in and its baseline are sampled at the same time.
Result<DeviceResult> RunDevicePhase(const Args& a, const uint8_t* src, Target* raw);
// The restore of a returning session: the region spilled whole to a device
// that holds it, then touched by DeviceThreads engine threads, --rounds times; adds
// its rows to `out` (and its wrong pages).
Status RunReturnPhase(const Args& a, const uint8_t* src, Target* raw, DeviceResult* out);
// The install step of a restore alone, on one core: verified bytes copied
// with UFFDIO_COPY into memfd pages a spill has just punched out, a page at
// a time, up to 256 MiB of src; no disk, no faults. GB/s, or 0 where
// userfaultfd cannot run.
double InstallOneCoreGbs(const Args& a, const uint8_t* src);
// The process's user + system CPU seconds so far.
double CpuSeconds();
// The same path over FaultEnv (write faults at random, read faults one at a
// time, a slow device); prints what was injected and counted, and returns
// whether every page came back exactly.
bool RunDeviceFaultPhase(const Args& a, const uint8_t* src);

// The CUDA backend's disk tier: a managed region of --size spilled through
// UvmDevice::SpillPages in groups (dormant pages, then again after an idle
// seal), brought back by kvtier_wait (Restore) and by the submission gate,
// and --samples single-page waits timed beside raw reads; --rounds times.
// --cuda gpu needs a GPU; auto takes one where it answers, else (and with
// host) a host-memory stand-in for the driver (spill_cuda.cc says what it
// leaves out).
struct CudaResult {
  std::vector<double> spill_gbs, wait_gbs, gate_gbs;  // per round
  std::vector<double> wait_raw_gbs, gate_raw_gbs;     // per round: RawBeside
  std::vector<double> wait_cpu_s_per_gb;              // per round: kvtier_wait's CPU
  std::vector<double> wait_ms, raw_ms;                // per single-page wait
  std::string driver, io_mode;
  size_t pages = 0, wrong_pages = 0;
  uint64_t restored = 0, stalls = 0;
  bool stand_in = false;  // the driver is the host-memory stand-in
  // On the stand-in: RefillOneCoreGbs (spill_cuda.cc), GB/s; 0 where it
  // could not run.
  double refill_gbs = 0;
};
Result<CudaResult> RunCudaPhase(const Args& a, const uint8_t* src, Target* raw);

// fio where installed: sequential write and read at the same depth and page
// size, and single-page random reads at depth 1.
struct FioResult {
  bool ran = false;
  double write_gbs = 0, read_gbs = 0, p50_ms = 0, p99_ms = 0;
  std::string note;
};
FioResult RunFio(const Args& a);

}  // namespace kvtier::bench::spill
