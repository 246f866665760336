// The extra phases of `kvtier-bench spill`: the store through injected
// faults, and fio (see spill_bench.h). Thread-safety: single-threaded tool.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <thread>
#include <vector>

#include "runtime/counters.h"
#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_batch.h"
#include "runtime/storage/spill_store.h"
#include "tools/bench/spill_bench.h"

namespace kvtier::bench::spill {
namespace {

// The number at the end of a path of JSON keys ("\"read\"", "\"bw_bytes\""),
// each found after the previous one; a string equal to a key but used as a
// value ("rw" : "read") is skipped because no ':' follows it. -1 if absent.
double JsonNumberAfter(const std::string& text, std::initializer_list<const char*> keys) {
  size_t pos = 0;
  for (const char* k : keys) {
    for (;;) {
      pos = text.find(k, pos);
      if (pos == std::string::npos) return -1;
      pos += strlen(k);
      size_t colon = text.find_first_not_of(" \t\r\n", pos);
      if (colon != std::string::npos && text[colon] == ':') {
        pos = colon + 1;
        break;
      }
    }
  }
  return strtod(text.c_str() + pos, nullptr);
}

std::string RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

}  // namespace

// Spills until every page is on disk (backing off as told), restores all,
// and requires that each page comes back exactly or fails loudly, with every
// injected error counted.
bool RunFaultPhase(const Args& a, const uint8_t* src, uint8_t* dst) {
  uint64_t size = std::min<uint64_t>(a.size, uint64_t{256} << 20);
  size_t pages = size / a.page;
  FaultEnv env(Env::Default(), a.seed);
  Counters c;
  SpillStoreConfig cfg;
  cfg.dir = a.dir;
  cfg.budget_bytes = size;
  cfg.page_size = a.page;
  cfg.queue_depth = a.qd;
  cfg.cipher = StoreCipher(a);
  cfg.grow_bytes = 4 * a.page;
  cfg.backoff_min_ns = 1'000'000;  // short waits keep the phase quick
  cfg.backoff_max_ns = 16'000'000;
  Result<std::unique_ptr<SpillStore>> created = SpillStore::Create(cfg, &env, &c);
  Result<std::unique_ptr<SpillBatch>> batch =
      created.ok() ? created.value()->NewBatch()
                   : Result<std::unique_ptr<SpillBatch>>(created.status());
  if (!batch.ok()) {
    printf("faults: %s\n", batch.status().message().c_str());
    return false;
  }
  SpillStore& store = *created.value();
  SpillBatch& b = *batch.value();
  // Armed after Create so the store's open probe sees a healthy disk.
  for (Fault f : {Fault::kWriteNoSpace, Fault::kWriteIoError, Fault::kShortWrite})
    env.SetRate(f, 0.02);
  env.SetRate(Fault::kDiskBitFlip, 0.01);
  env.SetRate(Fault::kReadIoError, 0.03);
  env.SetRate(Fault::kReadBitFlip, 0.03);
  env.Arm(Fault::kAllocNoSpace, 1, 1);
  env.SetRate(Fault::kSlow, 0.05);
  env.SetSlowDelay(2'000'000);

  std::vector<SpillSlot> slots(pages);
  std::vector<bool> on_disk(pages, false);
  size_t left = pages;
  int attempts = 0;
  for (; left > 0 && attempts < 1000; ++attempts) {
    while (!store.writable()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (size_t i = 0; i < pages; ++i) {
      if (!on_disk[i]) b.AddWrite(src + i * a.page, a.page, i);
    }
    std::vector<SpillCompletion> done;
    if (!b.WaitAll(&done).ok()) return false;
    for (const SpillCompletion& d : done) {
      if (d.status.ok()) {
        on_disk[d.tag] = true;
        slots[d.tag] = d.slot;
        --left;
      }
    }
  }
  memset(dst, 0, pages * a.page);
  for (size_t i = 0; i < pages; ++i) {
    if (on_disk[i]) b.AddRead(slots[i].index, dst + i * a.page, a.page, slots[i].checksum, i);
  }
  std::vector<SpillCompletion> done;
  if (!b.WaitAll(&done).ok()) return false;
  size_t exact = 0, detected = 0, silent = 0;
  for (const SpillCompletion& d : done) {
    bool same = memcmp(src + d.tag * a.page, dst + d.tag * a.page, a.page) == 0;
    if (d.status.ok()) {
      (same ? exact : silent)++;
    } else {
      ++detected;
    }
  }
  printf("\nfaults (FaultEnv seed %llu, %zu pages, every kind at once):\n  injected:",
         static_cast<unsigned long long>(a.seed), pages);
  for (int f = 0; f < kFaultKinds; ++f) {
    printf(" %s %llu", FaultName(Fault(f)),
           static_cast<unsigned long long>(env.injected(Fault(f))));
  }
  uint64_t write_faults = env.injected(Fault::kWriteNoSpace) + env.injected(Fault::kWriteIoError) +
                          env.injected(Fault::kShortWrite) + env.injected(Fault::kAllocNoSpace);
  printf(
      "\n  stats: spill_errors %llu, restore_errors %llu, checksum_mismatches %llu, disk_degraded "
      "%llu\n",
      static_cast<unsigned long long>(Counters::Get(c.spill_errors)),
      static_cast<unsigned long long>(Counters::Get(c.restore_errors)),
      static_cast<unsigned long long>(Counters::Get(c.checksum_mismatches)),
      static_cast<unsigned long long>(Counters::Get(c.disk_degraded)));
  printf(
      "  pages: %zu spilled after %d passes, %zu restored exactly, %zu failed loudly (%llu "
      "corrupted on disk, the rest had both reads faulted), %zu silently wrong, %zu never "
      "spilled\n",
      pages - left, attempts, exact, detected,
      static_cast<unsigned long long>(env.injected(Fault::kDiskBitFlip)), silent, left);
  bool ok = left == 0 && silent == 0 && exact + detected == pages &&
            detected >= env.injected(Fault::kDiskBitFlip) &&
            Counters::Get(c.spill_errors) == write_faults &&
            Counters::Get(c.restore_errors) == env.injected(Fault::kReadIoError);
  printf("  %s: no page lost or handed back wrong; every injected error shows in the stats\n",
         ok ? "PASS" : "FAIL");
  // The same faults through the simulated GPU's spill and fault path.
  return (!a.device || RunDeviceFaultPhase(a, src)) && ok;
}

FioResult RunFio(const Args& a) {
  FioResult f;
  if (system("command -v fio >/dev/null 2>&1") != 0) {
    f.note = "fio not installed";
    return f;
  }
  std::string file = a.dir + "/kvtier-bench.fio";
  std::string base = "fio --name=kvtier --filename=" + file + " --size=" + std::to_string(a.size) +
                     " --bs=" + std::to_string(a.page) +
                     " --direct=1 --ioengine=io_uring --output-format=json";
  std::string qd = " --iodepth=" + std::to_string(a.qd);
  std::string w = RunCommand(base + qd + " --rw=write 2>/dev/null");
  std::string r = RunCommand(base + qd + " --rw=read 2>/dev/null");
  std::string l =
      RunCommand(base + " --iodepth=1 --rw=randread --number_ios=" + std::to_string(a.samples) +
                 " 2>/dev/null");
  unlink(file.c_str());
  f.write_gbs = JsonNumberAfter(w, {"\"write\"", "\"bw_bytes\""}) / kGB;
  f.read_gbs = JsonNumberAfter(r, {"\"read\"", "\"bw_bytes\""}) / kGB;
  f.p50_ms = JsonNumberAfter(l, {"\"read\"", "\"clat_ns\"", "\"50.000000\""}) / 1e6;
  f.p99_ms = JsonNumberAfter(l, {"\"read\"", "\"clat_ns\"", "\"99.000000\""}) / 1e6;
  f.ran = f.write_gbs > 0 && f.read_gbs > 0;
  if (!f.ran) f.note = "fio ran but its JSON output was not understood";
  return f;
}

}  // namespace kvtier::bench::spill
