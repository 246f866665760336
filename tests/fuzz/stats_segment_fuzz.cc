// Fuzz target: a hostile or truncated /dev/shm/kvtier.<pid> file, read the
// way kvtier-top and kvtier-exporter read it (tools/stats/stats_reader.cc)
// and rendered by both (tools/top: text and JSON, with rates from a second
// sample; tools/exporter: the exposition). The file is named after this
// process, so the writer looks alive.
// Input: byte 0 holds flags; the rest is the file.
//   bit 0: make the header valid first (magic, version, size, an even
//          sequence, this pid and start time), so the fuzzer reaches the
//          fields behind it;
//   bit 1: keep the file as short as the input (else zero-padded to a full
//          segment).
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "kvtier/stats.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/exporter/exposition.h"
#include "tools/stats/process_check.h"
#include "tools/stats/stats_reader.h"
#include "tools/top/collector.h"
#include "tools/top/json_output.h"
#include "tools/top/layout.h"

namespace {

const std::string& Dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/kvtier-fuzz-stats.XXXXXX";
    const char* made = mkdtemp(tmpl);
    FUZZ_CHECK(made != nullptr);
    return std::string(made);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  if (!(flags & 2) && file.size() < sizeof(kvtier_stats_segment)) {
    file.resize(sizeof(kvtier_stats_segment), '\0');
  }
  if ((flags & 1) && file.size() >= sizeof(kvtier_stats_segment)) {
    kvtier_stats_segment header;
    memcpy(&header, file.data(), sizeof header);
    header.magic = KVTIER_STATS_MAGIC;
    header.version = KVTIER_STATS_VERSION;
    header.size = sizeof(kvtier_stats_segment);
    header.seq &= ~uint64_t{1};
    header.pid = getpid();
    header.start_ticks = kvtier::stats::ProcessStartTicks(getpid());
    memcpy(file.data(), &header, sizeof header);
  }
  const std::string path = Dir() + "/" + KVTIER_STATS_PREFIX + std::to_string(getpid());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
    FUZZ_CHECK(out.good());
  }
  std::string error;
  std::unique_ptr<kvtier::stats::SegmentDir> dir = kvtier::stats::SegmentDir::Open(Dir(), &error);
  FUZZ_CHECK(dir != nullptr);
  const std::vector<kvtier::stats::ReadResult> results = dir->ReadAll();
  for (const kvtier::stats::ReadResult& r : results) {
    FUZZ_CHECK((r.state == kvtier::stats::ReadState::kOk) == (r.snapshot != nullptr));
    FUZZ_CHECK(r.state == kvtier::stats::ReadState::kOk || !r.message.empty());
  }
  const std::string exposition = kvtier::exporter::RenderExposition(results);
  FUZZ_CHECK(exposition.find("kvtier_processes") != std::string::npos);

  kvtier::top::Collector collector(*dir, 0);
  kvtier::top::Model first = collector.Collect();
  (void)kvtier::top::RenderJson(first, 1.0);
  kvtier::top::ViewOptions options;
  options.snapshot = true;
  options.all_problems = true;
  options.tier_letters = true;
  for (int width : {40, 120}) {
    options.width = width;
    (void)kvtier::top::RenderText(first, options);
  }
  // A second sample of the same file: the rates path.
  kvtier::top::Model second = collector.Collect();
  (void)kvtier::top::RenderJson(second, 1.0);
  (void)kvtier::top::RenderText(second, options);
  unlink(path.c_str());
  return 0;
}
