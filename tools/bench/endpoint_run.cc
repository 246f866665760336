#include "tools/bench/endpoint_run.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Seeds of the prompt pieces: one shared system prompt, a history per user,
// a question per user and round.
uint64_t PieceSeed(uint64_t seed, uint64_t kind, uint64_t user, uint64_t question) {
  return seed * 0x9E3779B97F4A7C15ull ^ kind << 56 ^ user << 24 ^ question;
}

// One request's outcome, posted by its thread.
struct Finished {
  Launch launch;
  double finish_s = 0;
  Result<ChatAnswer> answer = Status::Error("not run");
};

std::string Escaped(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// One CSV file as rows of named fields (no quoting: these files have none).
Result<std::vector<std::map<std::string, std::string>>> ReadCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::Errorf("%s: cannot read it", path.c_str());
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    return cells;
  };
  std::string line;
  if (!std::getline(in, line)) return Status::Errorf("%s: empty", path.c_str());
  const std::vector<std::string> names = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const std::vector<std::string> cells = split(line);
    if (cells.size() != names.size()) {
      return Status::Errorf("%s: line %zu has %zu fields, the header %zu", path.c_str(),
                            rows.size() + 2, cells.size(), names.size());
    }
    std::map<std::string, std::string>& row = rows.emplace_back();
    for (size_t i = 0; i < names.size(); ++i) row[names[i]] = cells[i];
  }
  return rows;
}

}  // namespace

Result<SystemResult> ReadEndpointRun(const std::string& dir) {
  std::string requests;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("requests-") && name.ends_with(".csv")) {
      if (!requests.empty()) {
        return Status::Errorf("%s: more than one requests-*.csv (one run a directory)",
                              dir.c_str());
      }
      requests = name;
    }
  }
  if (ec) return Status::Errorf("%s: %s", dir.c_str(), ec.message().c_str());
  if (requests.empty())
    return Status::Errorf("%s: no requests-*.csv (not a --endpoint run)", dir.c_str());
  SystemResult r;
  r.name = requests.substr(9, requests.size() - 9 - 4);
  Result<std::vector<std::map<std::string, std::string>>> rows = ReadCsv(dir + "/" + requests);
  if (!rows.ok()) return rows.status();
  auto number = [](const std::map<std::string, std::string>& row, const char* key, double* out) {
    auto it = row.find(key);
    if (it == row.end()) return false;
    char* end = nullptr;
    *out = strtod(it->second.c_str(), &end);
    return end != it->second.c_str() && *end == '\0';
  };
  for (const auto& row : rows.value()) {
    double v[9];
    const char* keys[9] = {"prompt_tokens",   "generation_tokens", "ttft",
                           "generation_time", "user_id",           "question_id",
                           "launch_time",     "finish_time",       "recomputed_tokens"};
    for (int i = 0; i < 9; ++i) {
      if (!number(row, keys[i], &v[i])) {
        return Status::Errorf("%s/%s: a row without a number in %s", dir.c_str(), requests.c_str(),
                              keys[i]);
      }
    }
    RequestRow q;
    q.prompt_tokens = static_cast<int>(v[0]);
    q.generation_tokens = static_cast<int>(v[1]);
    q.ttft = v[2];
    q.generation_time = v[3];
    q.user_id = static_cast<int>(v[4]);
    q.question_id = static_cast<int>(v[5]);
    q.launch_time = v[6];
    q.finish_time = v[7];
    q.recomputed = static_cast<int>(v[8]);
    q.hit_device = q.prompt_tokens - q.recomputed;
    double returning = 0;
    if (row.contains("returning")) {
      if (!number(row, "returning", &returning)) {
        return Status::Errorf("%s/%s: a row without a number in returning", dir.c_str(),
                              requests.c_str());
      }
      q.returning = returning != 0;
    } else {
      r.knows_returning = false;  // written before the column existed
    }
    r.rows.push_back(q);
  }
  Result<std::vector<std::map<std::string, std::string>>> summary = ReadCsv(dir + "/summary.csv");
  if (!summary.ok()) return summary.status();
  double wall = 0, late = 0;
  if (summary.value().size() != 1 || !number(summary.value()[0], "run_seconds", &wall) ||
      !number(summary.value()[0], "late_launches", &late)) {
    return Status::Errorf("%s/summary.csv: expected one row with run_seconds and late_launches",
                          dir.c_str());
  }
  r.wall_s = wall;
  r.late_launches = static_cast<int64_t>(late);
  return r;
}

std::string PromptWords(uint64_t seed, int count) {
  uint64_t z = seed;
  auto next = [&z] {
    z += 0x9E3779B97F4A7C15ull;  // SplitMix64
    uint64_t x = z;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  // Two-letter words led by one of "aeiost": one token each in common BPE
  // and SentencePiece vocabularies, and in random_gguf.py's.
  static constexpr char kFirst[] = "aeiost";
  std::string out;
  out.reserve(static_cast<size_t>(count) * 3);
  for (int i = 0; i < count; ++i) {
    if (i > 0) out += ' ';
    const uint64_t r = next();
    out += kFirst[r % 6];
    out += static_cast<char>('a' + (r >> 8) % 26);
  }
  return out;
}

Result<EndpointRun> RunAgainstEndpoint(const EndpointRunConfig& config) {
  const WorkloadConfig& w = config.workload;
  Workload workload(w);
  const std::string system_prompt = PromptWords(PieceSeed(w.seed, 1, 0, 0), w.shared_system_prompt);
  // Each session's conversation (a session has one request at a time; its
  // thread gets a copy, and its answer is appended here when it arrives).
  std::map<int, std::vector<ChatMessage>> conversations;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Finished> finished;  // guarded by mu
  std::vector<std::thread> threads;
  int in_flight = 0;

  EndpointRun run;
  run.result.name = config.label;
  run.result.measure_start_s = workload.measure_start();
  run.result.measure_end_s = workload.measure_end();
  std::map<std::pair<int, int>, std::string> answers;
  Status failure = Status::Ok();
  const auto start = Clock::now();
  auto now_s = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  auto launch = [&](const Launch& l) {
    std::vector<ChatMessage>& messages = conversations[l.session];
    const std::string question =
        PromptWords(PieceSeed(w.seed, 3, l.user_id, l.question_id), w.question_len);
    if (messages.empty()) {
      messages.push_back({"system", system_prompt});
      messages.push_back(
          {"user", PromptWords(PieceSeed(w.seed, 2, l.user_id, 0), w.user_history_prompt) + " " +
                       question});
    } else {
      messages.push_back({"user", question});
    }
    ChatRequest request{config.model, messages, l.answer_tokens};
    ++in_flight;
    ++run.requests;
    threads.emplace_back([&, l, request = std::move(request)] {
      Finished f;
      f.launch = l;
      f.answer = StreamChat(config.endpoint, request, config.timeout_s);
      f.finish_s = now_s();
      std::lock_guard<std::mutex> lock(mu);
      finished.push_back(std::move(f));
      cv.notify_one();
    });
  };

  std::vector<Launch> launches;
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    // Answers first (a late user launches on the tick after its answer),
    // then the launches due by now.
    std::vector<Finished> done;
    done.swap(finished);
    lock.unlock();
    for (Finished& f : done) {
      --in_flight;
      const Launch& l = f.launch;
      if (!f.answer.ok()) {
        if (failure.ok()) {
          failure = Status::Errorf("%s: request of user %d, round %d (launched at %.1f s): %s",
                                   config.endpoint.Url().c_str(), l.user_id, l.question_id,
                                   l.time_s, f.answer.status().message().c_str());
        }
        continue;
      }
      const ChatAnswer& a = f.answer.value();
      conversations[l.session].push_back({"assistant", a.text});
      answers[{l.user_id, l.question_id}] = a.text;
      workload.OnFinish(l.session, f.finish_s);
      if (!config.quiet) {
        fprintf(stderr, "  %-10s user %3d round %2d: ttft %7.3f s, %d prompt tokens (%d cached)\n",
                config.label.c_str(), l.user_id, l.question_id, a.ttft_s, a.prompt_tokens,
                a.cached_tokens);
      }
      if (!l.measured) continue;
      RequestRow row;
      row.prompt_tokens = a.prompt_tokens >= 0 ? a.prompt_tokens : l.prompt_tokens;
      row.generation_tokens = a.completion_tokens >= 0 ? a.completion_tokens : l.answer_tokens;
      row.ttft = a.ttft_s;
      row.generation_time = a.generation_s;
      row.user_id = l.user_id;
      row.question_id = l.question_id;
      row.returning = l.returning;
      row.launch_time = l.time_s;
      row.finish_time = f.finish_s;
      row.hit_device = std::clamp(a.cached_tokens, 0, row.prompt_tokens);
      row.recomputed = row.prompt_tokens - row.hit_device;
      run.result.rows.push_back(row);
    }
    if (failure.ok()) {
      launches.clear();
      workload.Advance(now_s(), &launches);
      for (const Launch& l : launches) launch(l);
    }
    const double next = failure.ok() ? workload.NextEventTime() : Workload::kNever;
    lock.lock();
    if (in_flight == 0 && finished.empty() && next == Workload::kNever) break;
    if (!finished.empty()) continue;
    if (next == Workload::kNever) {
      cv.wait(lock, [&] { return !finished.empty(); });
    } else {
      cv.wait_until(lock, start + std::chrono::duration<double>(next),
                    [&] { return !finished.empty(); });
    }
  }
  lock.unlock();
  for (std::thread& t : threads) t.join();
  if (!failure.ok()) return failure;
  run.result.wall_s = now_s();
  run.result.late_launches = workload.late_launches();
  run.users = workload.sessions();
  std::sort(run.result.rows.begin(), run.result.rows.end(),
            [](const RequestRow& a, const RequestRow& b) {
              return std::tie(a.launch_time, a.user_id) < std::tie(b.launch_time, b.user_id);
            });
  for (const auto& [key, text] : answers) {
    run.answers.push_back("user " + std::to_string(key.first) + " question " +
                          std::to_string(key.second) + ": " + Escaped(text));
  }
  return run;
}

}  // namespace kvtier::bench
