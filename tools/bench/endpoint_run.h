// kvtier-bench multiround --endpoint: LMBenchmark's multi-round QA played in
// real time against an OpenAI-compatible server, as multi-round-qa.py does.
//
// The trace is the model's (Workload: the same users, rounds, joins, think
// times and seeds); each launch becomes a streamed chat completion that
// carries the user's conversation so far: the shared system prompt, the
// user's history and first question, then every earlier answer (as the
// server sent it) and question. Prompts are two-letter words, one per token
// the trace asks for (about one token each in most vocabularies); the rows
// record the server's own token
// counts (usage), and the prompt tokens it reports as cached
// (usage.prompt_tokens_details.cached_tokens) as hit_device_tokens, the rest
// as recomputed_tokens: the client sees the server's reuse, not the tier the
// KV came back from.
// Each request runs on a thread of its own, so users overlap as the trace
// says. The first request that fails stops all launches; the run then waits
// for the requests in flight and fails with one line naming the request.
// Thread-safety: RunAgainstEndpoint is called from one thread.
#pragma once

#include <string>
#include <vector>

#include "runtime/status.h"
#include "tools/bench/openai_client.h"
#include "tools/bench/systems.h"
#include "tools/bench/workload.h"

namespace kvtier::bench {

struct EndpointRunConfig {
  WorkloadConfig workload;
  Endpoint endpoint;
  std::string model;  // the served model's name
  std::string label = "endpoint";
  double timeout_s = 120;  // per step of a request (StreamChat)
  bool quiet = false;      // no progress line per request on stderr
};

struct EndpointRun {
  SystemResult result;  // measured requests; wall_s is the whole run
  // Every request's answer, "user U question Q: TEXT" (TEXT's control bytes
  // and backslashes escaped), sorted by user and question: two runs of one
  // trace against servers that keep or restore KV must share these lines.
  std::vector<std::string> answers;
  int requests = 0;  // launched, measured or not
  int users = 0;     // sessions the trace started
};

Result<EndpointRun> RunAgainstEndpoint(const EndpointRunConfig& config);

// A run written by `multiround --endpoint` read back from its --output
// directory: the rows of its one requests-<label>.csv, its run time and late
// launches from summary.csv (for --combine).
Result<SystemResult> ReadEndpointRun(const std::string& dir);

// The text of `count` two-letter words drawn from `seed` (the prompt pieces
// of RunAgainstEndpoint; one word per prompt token the trace asks for).
std::string PromptWords(uint64_t seed, int count);

}  // namespace kvtier::bench
