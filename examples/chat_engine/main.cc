// chat_engine: a small multi-session chat engine's KV cache on a CUDA device.
//
// It knows nothing of kvtier: it links the real libcudart, allocates weights
// and one KV tensor per layer with cudaMalloc (as vLLM does), runs sessions
// that come back for more turns, and verifies every KV block it reads. Run it
// on a GPU, or on the kvtier simulated GPU (one command line):
//   LD_PRELOAD=libkvtier.so KVTIER_BACKEND=sim KVTIER_DEVICE_BUDGET=64M
//     ./chat_engine --layers 8 --kv-bytes 512M
// Exit status: 0 all verified, 1 device error, 2 bad flags, 3 integrity failure.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine.h"
#include "kv_access.h"
#include "pattern.h"

namespace {

struct Flags {
  chat::EngineConfig engine;
  uint64_t kv_bytes = 0;  // 0: from --blocks
  std::string compute = "cpu";
  int weights = 4;
  int weight_mib = 8;
  std::string hold;  // --hold FILE: wait for FILE before freeing memory
};

void Usage(FILE* out) {
  fprintf(out,
          "usage: chat_engine [flags]\n"
          "  --layers N         KV tensors, one per layer (8)\n"
          "  --blocks N         blocks per layer (128)\n"
          "  --kv-bytes SIZE    total KV bytes instead of --blocks (e.g. 512M, 2G)\n"
          "  --block-kib N      block size in KiB (256)\n"
          "  --sessions N       conversations (16)\n"
          "  --max-active N     sessions per step, the batch (4)\n"
          "  --turns N          turns per session (3)\n"
          "  --prompt-blocks N  blocks written by each turn's prefill (6)\n"
          "  --gen-blocks N     decode steps per turn, one block each (4)\n"
          "  --think-steps N    an idle session returns after 1..N steps (8)\n"
          "  --seed N           scheduler seed (1)\n"
          "  --weights N        weight buffers before the KV cache (4)\n"
          "  --weight-mib N     size of each weight buffer (8)\n"
          "  --compute MODE     cpu: direct access, only on the kvtier simulated GPU;\n"
          "                     copy: cudaMemcpy staging, any device; cuda: kernels (cpu)\n"
          "  --park             tell kvtier (when preloaded) which sessions are idle:\n"
          "                     KVTIER_HINT_DORMANT, then kvtier_wait before they run\n"
          "  --hold FILE        after the report, keep the memory allocated until FILE\n"
          "                     exists (polled every 10 ms, at most 60 s), then free it\n");
}

bool ParseSize(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || errno != 0) return false;
  uint64_t mult = 1;
  switch (toupper(static_cast<unsigned char>(*end))) {
    case '\0':
      break;
    case 'K':
      mult = 1ull << 10;
      ++end;
      break;
    case 'M':
      mult = 1ull << 20;
      ++end;
      break;
    case 'G':
      mult = 1ull << 30;
      ++end;
      break;
    default:
      return false;
  }
  if (*end == 'i' || *end == 'I') ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = v * mult;
  return true;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    if (name == "--help" || name == "-h") {
      Usage(stdout);
      exit(0);
    }
    if (name == "--park") {  // the one flag without a value
      f->engine.park = true;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "chat_engine: %s needs a value\n", name.c_str());
      return false;
    }
    const char* value = argv[++i];
    auto integer = [&](auto* out, long long min) {
      char* end = nullptr;
      long long v = strtoll(value, &end, 10);
      if (end == value || *end != '\0' || v < min) {
        fprintf(stderr, "chat_engine: %s=%s: expected an integer >= %lld\n", name.c_str(), value,
                min);
        return false;
      }
      *out = static_cast<std::remove_reference_t<decltype(*out)>>(v);
      return true;
    };
    chat::EngineConfig& e = f->engine;
    int64_t block_kib = 0;
    bool ok = true;
    if (name == "--layers")
      ok = integer(&e.layers, 1);
    else if (name == "--blocks")
      ok = integer(&e.blocks, 1);
    else if (name == "--block-kib") {
      ok = integer(&block_kib, 4);
      e.block_bytes = static_cast<size_t>(block_kib) << 10;
    } else if (name == "--sessions")
      ok = integer(&e.sessions, 1);
    else if (name == "--max-active")
      ok = integer(&e.max_active, 1);
    else if (name == "--turns")
      ok = integer(&e.turns, 1);
    else if (name == "--prompt-blocks")
      ok = integer(&e.prompt_blocks, 0);
    else if (name == "--gen-blocks")
      ok = integer(&e.gen_blocks, 0);
    else if (name == "--think-steps")
      ok = integer(&e.think_steps, 1);
    else if (name == "--seed")
      ok = integer(&e.seed, 0);
    else if (name == "--weights")
      ok = integer(&f->weights, 0);
    else if (name == "--weight-mib")
      ok = integer(&f->weight_mib, 1);
    else if (name == "--kv-bytes") {
      ok = ParseSize(value, &f->kv_bytes) && f->kv_bytes > 0;
      if (!ok)
        fprintf(stderr, "chat_engine: --kv-bytes=%s: expected a size such as 512M or 2G\n", value);
    } else if (name == "--hold") {
      f->hold = value;
      ok = !f->hold.empty();
      if (!ok) fprintf(stderr, "chat_engine: --hold needs a file name\n");
    } else if (name == "--compute") {
      f->compute = value;
      ok = f->compute == "cpu" || f->compute == "copy" || f->compute == "cuda";
      if (!ok) fprintf(stderr, "chat_engine: --compute=%s: expected cpu, copy or cuda\n", value);
    } else {
      fprintf(stderr, "chat_engine: unknown flag %s (see --help)\n", name.c_str());
      ok = false;
    }
    if (!ok) return false;
  }
  if (f->kv_bytes) {
    uint64_t per_block = uint64_t(f->engine.layers) * f->engine.block_bytes;
    f->engine.blocks = static_cast<int64_t>(f->kv_bytes / per_block);
    if (f->engine.blocks == 0) {
      fprintf(stderr, "chat_engine: --kv-bytes=%" PRIu64 " holds no block of %d layers x %zu KiB\n",
              f->kv_bytes, f->engine.layers, f->engine.block_bytes >> 10);
      return false;
    }
  }
  return true;
}

std::string Gib(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30))
    snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(1ull << 30));
  else
    snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1ull << 20));
  return buf;
}

// Prints a failed CUDA call and exits 1.
void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "chat_engine: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  exit(1);
}

bool ContainsNoCase(std::string text, std::string word) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  return lower(std::move(text)).find(lower(std::move(word))) != std::string::npos;
}

// --hold: the process stays as it is, memory allocated and idle, until
// another program creates `path`, so tools can look at a stable state.
void HoldUntilExists(const std::string& path) {
  printf("chat_engine: holding until %s exists\n", path.c_str());
  constexpr auto kPoll = std::chrono::milliseconds(10);
  constexpr auto kLimit = std::chrono::seconds(60);
  const auto deadline = std::chrono::steady_clock::now() + kLimit;
  while (access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      fprintf(stderr, "chat_engine: --hold %s: the file did not appear within 60 s; going on\n",
              path.c_str());
      return;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  chat::EngineConfig& cfg = flags.engine;
  std::string error;
  if (!chat::Engine::Validate(cfg, &error)) {
    fprintf(stderr, "chat_engine: %s\n", error.c_str());
    return 2;
  }

  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    fprintf(
        stderr,
        "chat_engine: no usable CUDA device (cudaGetDeviceCount: %s). Without a GPU, run it on the "
        "kvtier simulated GPU: LD_PRELOAD=/path/to/libkvtier.so KVTIER_BACKEND=sim ./chat_engine\n",
        cudaGetErrorName(e));
    return 1;
  }
  Check(cudaSetDevice(0), "cudaSetDevice(0)");
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  size_t free_bytes = 0, total_bytes = 0;
  Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  printf("chat_engine: device 0 \"%s\", %s total, %s free\n", prop.name, Gib(total_bytes).c_str(),
         Gib(free_bytes).c_str());

  // Direct CPU access to "device" memory is only sound when that memory is
  // host memory: the kvtier simulated GPU, recognised by its name.
  std::unique_ptr<chat::KvAccess> access;
  if (flags.compute == "cpu") {
    if (!ContainsNoCase(prop.name, "simulated")) {
      fprintf(stderr,
              "chat_engine: --compute cpu needs host-addressable device memory (the kvtier "
              "simulated GPU, "
              "whose name contains \"simulated\"); device \"%s\" is not one: use --compute copy or "
              "cuda\n",
              prop.name);
      return 2;
    }
    access = chat::MakeCpuAccess();
  } else if (flags.compute == "copy") {
    access = chat::MakeCopyAccess(cfg.block_bytes);
  } else {
    if (ContainsNoCase(prop.name, "simulated")) {
      fprintf(stderr,
              "chat_engine: --compute cuda: the simulated GPU runs no kernels; use --compute "
              "cpu or copy\n");
      return 2;
    }
    access = chat::MakeCudaAccess(cfg.block_bytes);
    if (!access) {
      fprintf(stderr,
              "chat_engine: --compute cuda: built without kernels (configure with "
              "-DKVTIER_CHAT_ENGINE_CUDA=ON); use --compute copy\n");
      return 2;
    }
  }

  // Weights first, as an engine loads its model before sizing the KV cache.
  size_t weight_bytes = size_t(flags.weight_mib) << 20;
  std::vector<void*> weights(flags.weights);
  std::vector<uint64_t> host(weight_bytes / 8);
  for (int i = 0; i < flags.weights; ++i) {
    Check(cudaMalloc(&weights[i], weight_bytes), "cudaMalloc(weights)");
    chat::FillPattern(host.data(), host.size(), chat::Mix64(0x77656967687400ull + i));
    Check(cudaMemcpy(weights[i], host.data(), weight_bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy(weights)");
  }

  size_t layer_bytes = size_t(cfg.blocks) * cfg.block_bytes;
  std::vector<void*> kv(cfg.layers);
  for (int l = 0; l < cfg.layers; ++l) {
    Check(cudaMalloc(&kv[l], layer_bytes), "cudaMalloc(KV layer)");
    Check(cudaMemset(kv[l], 0, layer_bytes), "cudaMemset(KV layer)");
  }
  printf("chat_engine: weights %d x %d MiB; KV %d layers x %" PRId64
         " blocks x %zu KiB = %s; compute %s\n",
         flags.weights, flags.weight_mib, cfg.layers, cfg.blocks, cfg.block_bytes >> 10,
         Gib(layer_bytes * cfg.layers).c_str(), flags.compute.c_str());
  printf(
      "chat_engine: %d sessions x %d turns, batch %d, prompt %d + %d generated blocks per turn, "
      "seed %" PRIu64 "\n",
      cfg.sessions, cfg.turns, cfg.max_active, cfg.prompt_blocks, cfg.gen_blocks, cfg.seed);

  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  auto t0 = std::chrono::steady_clock::now();
  Check(cudaEventRecord(start, nullptr), "cudaEventRecord");
  chat::Engine engine(cfg, kv, access.get());
  bool ok = engine.Run(&error);
  Check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
  Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  float device_ms = 0;
  Check(cudaEventElapsedTime(&device_ms, start, stop), "cudaEventElapsedTime");
  if (!ok) {
    fprintf(stderr, "chat_engine: %s\n", error.c_str());
    return engine.integrity_failed() ? 3 : 1;
  }

  // The weights were never touched by the sessions: they must be intact.
  for (int i = 0; i < flags.weights; ++i) {
    Check(cudaMemcpy(host.data(), weights[i], weight_bytes, cudaMemcpyDeviceToHost),
          "cudaMemcpy(weights back)");
    size_t bad =
        chat::FirstMismatch(host.data(), host.size(), chat::Mix64(0x77656967687400ull + i));
    if (bad != host.size()) {
      fprintf(stderr, "chat_engine: integrity check failed: weight buffer %d word %zu changed\n", i,
              bad);
      return 3;
    }
  }
  const chat::EngineStats& s = engine.stats();
  uint64_t layer_block = uint64_t(cfg.layers) * cfg.block_bytes;
  printf("chat_engine: served %" PRId64 " sessions, %" PRId64 " turns in %" PRId64 " steps\n",
         s.sessions_served, s.turns, s.steps);
  printf("chat_engine: blocks read %" PRId64 " (%s), written %" PRId64 " (%s)\n", s.blocks_read,
         Gib(uint64_t(s.blocks_read) * layer_block).c_str(), s.blocks_written,
         Gib(uint64_t(s.blocks_written) * layer_block).c_str());
  printf("chat_engine: recomputes %" PRId64 " (%" PRId64
         " blocks prefilled again), evictions %" PRId64 ", preemptions %" PRId64 "\n",
         s.recomputes, s.recompute_blocks, s.evictions, s.preemptions);
  printf("chat_engine: integrity checks passed %" PRId64 " (blocks x layers), weights %d intact\n",
         s.checks_passed, flags.weights);
  if (cfg.park) {
    printf("chat_engine: parked %" PRId64 " idle sessions with kvtier (calls refused: %" PRId64
           ")\n",
           s.parked, s.kvtier_calls_failed);
  }
  printf("chat_engine: wall %.2f s (device events %.2f s)\n", wall, device_ms / 1000.0);
  if (!flags.hold.empty()) HoldUntilExists(flags.hold);

  for (void* p : kv) Check(cudaFree(p), "cudaFree(KV layer)");
  for (void* p : weights) Check(cudaFree(p), "cudaFree(weights)");
  Check(cudaEventDestroy(start), "cudaEventDestroy");
  Check(cudaEventDestroy(stop), "cudaEventDestroy");
  Check(cudaGetLastError(), "cudaGetLastError");

  printf("chat_engine: OK\n");
  return 0;
}
