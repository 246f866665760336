// AllocationMatcher (runtime/allocation_matcher.h): the grammar, table-driven, with
// its errors; and the proposed default against vLLM's and llama.cpp's
// allocation sequences (alloc_sequences.h): every KV allocation that can be
// known as one is tiered, and no weight ever is.
#include "runtime/allocation_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "alloc_sequences.h"

namespace kvtier {
namespace {

// A caller known by its library alone.
AllocationMatcher::Decision DecideFrom(AllocationMatcher& m, uint64_t size, uint64_t index,
                                       std::string lib) {
  CallSite site(std::move(lib), {});
  return m.Decide(size, index, site);
}

using replay::kMiB;
using replay::Role;

struct Allocation {
  uint64_t size;
  const char* lib;
};

struct Case {
  const char* rule;
  std::vector<Allocation> allocations;
  std::string expected;  // one character per allocation: T tiered, . plain
};

TEST(AllocationMatcher, GrammarTable) {
  const Case cases[] = {
      {"size>=64M", {{64 * kMiB, ""}, {63 * kMiB, ""}}, "T."},
      {"run>=2", {{8, ""}, {8, ""}, {8, ""}, {9, ""}, {8, ""}}, ".TT.."},
      {"run>=3", {{8, ""}, {8, ""}, {8, ""}, {8, ""}, {9, ""}}, "..TT."},
      // Runs count only allocations that pass the other terms: the small
      // one in between does not break the run of large ones.
      {"size>=1M,run>=2", {{2 * kMiB, ""}, {4096, ""}, {2 * kMiB, ""}}, "..T"},
      {"nth>=1,nth<3", {{1, ""}, {2, ""}, {3, ""}, {4, ""}}, ".TT."},
      {"nth>0,nth<=1", {{1, ""}, {2, ""}, {3, ""}}, ".T."},
      {"lib~ggml,nth>=1",
       {{5, "libggml-cuda.so"}, {5, "libc10.so"}, {5, "libggml-cuda.so"}},
       "..T"},
      // Alternatives: either holds; each keeps its own counts.
      {"size<2;nth>=2", {{1, ""}, {5, ""}, {5, ""}, {1, ""}}, "T.TT"},
      {"none;all", {{1, ""}}, "T"},
      {"index>=1,run>=2", {{7, ""}, {7, ""}, {7, ""}}, "..T"},
  };
  for (const Case& c : cases) {
    Result<AllocationMatcher> m = AllocationMatcher::Parse(c.rule);
    ASSERT_TRUE(m.ok()) << c.rule << ": " << m.status().message();
    std::string got;
    uint64_t index = 0;
    for (const Allocation& a : c.allocations) {
      got += DecideFrom(m.value(), a.size, index++, a.lib).tier ? 'T' : '.';
    }
    EXPECT_EQ(got, c.expected) << c.rule;
  }
}

TEST(AllocationMatcher, DecisionSaysWhichAlternativeAndRun) {
  auto m = AllocationMatcher::Parse("size<2;size>=8,run>=2");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m.value().alternatives(), 2u);
  EXPECT_FALSE(DecideFrom(m.value(), 8, 0, "").tier);
  AllocationMatcher::Decision d = DecideFrom(m.value(), 8, 1, "");
  EXPECT_TRUE(d.tier);
  EXPECT_EQ(d.alternative, 1);
  EXPECT_EQ(d.run, 2u);
  EXPECT_EQ(d.nth, 1u);
  EXPECT_EQ(DecideFrom(m.value(), 1, 2, "").alternative, 0);
}

TEST(AllocationMatcher, BadRulesSayWhatIsWrongAndWhatIsAccepted) {
  const std::pair<const char*, const char*> bad[] = {
      {"", "empty match rule"},        {"size>=1M;", "empty alternative"},
      {"run>2", "run takes >="},       {"run>=1", "at least 2"},
      {"run>=x", "whole number"},      {"nth~3", "nth takes"},
      {"nth>=", "whole number"},       {"size>=lots", "size>=lots"},
      {"colour~red", "unknown field"},
  };
  for (const auto& [rule, why] : bad) {
    Result<AllocationMatcher> m = AllocationMatcher::Parse(rule);
    ASSERT_FALSE(m.ok()) << rule;
    EXPECT_NE(m.status().message().find(why), std::string::npos)
        << rule << " -> " << m.status().message();
    EXPECT_NE(m.status().message().find("accepted"), std::string::npos) << m.status().message();
  }
}

// Replays a sequence through the matcher; returns tiered/total per role.
struct Tally {
  int tiered[5] = {};
  int total[5] = {};
  int Tiered(Role r) const { return tiered[static_cast<int>(r)]; }
  int Total(Role r) const { return total[static_cast<int>(r)]; }
};

// The innermost frames above the allocator, by role: llama.cpp allocates its
// KV buffer under its KV cache's constructor (seen on its CPU build,
// tests/engines/llama.cpp), its weights under the model loader, its compute
// buffer under the scheduler; PyTorch's allocator has none of those.
std::vector<std::string> Stack(Role role, bool llama_cpp) {
  if (!llama_cpp) return {"_ZN3c104cuda20CUDACachingAllocator6Native", "THPVariable_empty"};
  switch (role) {
    case Role::kKv:
      return {"ggml_backend_buft_alloc_buffer", "ggml_backend_alloc_ctx_tensors_from_buft",
              "_ZN14llama_kv_cacheC1ERK11llama_modelRK13llama_hparams9ggml_type",
              "_ZNK11llama_model13create_memoryERK19llama_memory_paramsRK13llama_cparams"};
    case Role::kWeight:
      return {"ggml_backend_buft_alloc_buffer",
              "_ZN11llama_model12load_tensorsER18llama_model_loader"};
    default:
      return {"ggml_backend_buft_alloc_buffer", "ggml_gallocr_reserve_n",
              "ggml_backend_sched_reserve",
              "_ZN13llama_context13graph_reserveEjjjPK22llama_memory_context_ib"};
  }
}

Tally Replay(const char* rule, const std::vector<replay::Step>& steps, const char* lib) {
  auto m = AllocationMatcher::Parse(rule);
  EXPECT_TRUE(m.ok()) << m.status().message();
  const bool llama_cpp = std::string(lib).find("ggml") != std::string::npos;
  Tally t;
  uint64_t index = 0;
  for (const replay::Step& s : steps) {
    if (s.free) continue;
    const int role = static_cast<int>(s.role);
    ++t.total[role];
    CallSite site(lib, Stack(s.role, llama_cpp));
    if (m.value().Decide(s.bytes, index++, site).tier) ++t.tiered[role];
  }
  return t;
}

TEST(AllocationMatcher, DefaultCatchesVllmKvAndNoWeights) {
  for (uint64_t kv : {64 * kMiB, 256 * kMiB, uint64_t{1050673152}, 2048 * kMiB}) {
    Tally t =
        Replay(kDefaultRule, replay::VllmLike(32, kv), "/usr/lib/python3/torch/lib/libc10_cuda.so");
    EXPECT_EQ(t.Tiered(Role::kWeight), 0) << "kv " << kv;
    EXPECT_EQ(t.Tiered(Role::kActivation), 0) << "kv " << kv;
    // The first two of the run cannot be known as KV when they arrive.
    EXPECT_EQ(t.Tiered(Role::kKv), 30) << "kv " << kv;
    EXPECT_EQ(t.Total(Role::kKv), 32);
  }
}

TEST(AllocationMatcher, SizeAloneCatchesVllmWeights) {
  // Why the default is not a size threshold: any threshold that catches a
  // 256 MiB KV tensor catches the 1 GiB embedding and lm_head too.
  Tally t = Replay("size>=64M", replay::VllmLike(32, 256 * kMiB), "libc10_cuda.so");
  EXPECT_EQ(t.Tiered(Role::kKv), 32);
  EXPECT_GT(t.Tiered(Role::kWeight), 60);
}

TEST(AllocationMatcher, DefaultCatchesLlamaCppKvOnly) {
  // A large model (weights first) and a small one (weights under 64 MiB: the
  // KV buffer is then the first large allocation, the compute buffer the
  // second, which an order-based rule gets wrong).
  for (const auto& steps :
       {replay::LlamaCppLike(), replay::LlamaCppLike(256 * kMiB, 40 * kMiB, 300 * kMiB)}) {
    Tally t = Replay(kDefaultRule, steps, "/opt/llama.cpp/build/bin/libggml-cuda.so");
    EXPECT_EQ(t.Tiered(Role::kKv), 1);
    EXPECT_EQ(t.Tiered(Role::kWeight), 0);
    EXPECT_EQ(t.Tiered(Role::kCompute), 0);
    EXPECT_EQ(t.Tiered(Role::kScratch), 0);
  }
  // What the order-based rule did on the small model.
  Tally old = Replay("lib~ggml,size>=64M,nth>=1,nth<2",
                     replay::LlamaCppLike(256 * kMiB, 40 * kMiB, 300 * kMiB), "libggml-cuda.so");
  EXPECT_EQ(old.Tiered(Role::kKv), 0);
  EXPECT_EQ(old.Tiered(Role::kCompute), 1);
}

TEST(AllocationMatcher, EachEnginesAlternativeLeavesTheOtherAlone) {
  // llama.cpp's sequence from PyTorch's allocator: no run, no ggml library.
  Tally t = Replay(kDefaultRule, replay::LlamaCppLike(), "libc10_cuda.so");
  for (int r = 0; r < 5; ++r) EXPECT_EQ(t.tiered[r], 0) << replay::RoleName(static_cast<Role>(r));
}

}  // namespace
}  // namespace kvtier
