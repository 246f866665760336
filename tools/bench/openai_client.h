// A client of OpenAI-compatible servers (vLLM, SGLang, llama-server, the
// engine tests' openai_server.mjs): lists the served models and streams one
// chat completion, timing its first content chunk. HTTP through Boost.Beast,
// JSON through nlohmann::json; plain http only.
// Thread-safety: functions of their arguments; each call makes its own
// connection, so calls may run on several threads at once.
#pragma once

#include <string>
#include <vector>

#include "runtime/status.h"

namespace kvtier::bench {

// http://HOST[:PORT][/PATH], e.g. http://127.0.0.1:8080/v1; requests go to
// PATH + "/chat/completions" and PATH + "/models".
struct Endpoint {
  std::string host;
  std::string port = "80";
  std::string base;  // "/v1", without a trailing slash
  std::string Url() const { return "http://" + host + ":" + port + base; }
};
Result<Endpoint> ParseEndpoint(const std::string& url);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  int max_tokens = 16;
};

// One streamed answer. ttft_s is from the start of the request (connection
// included) to the first chunk with content; generation_s from there to
// [DONE]. Token counts are the server's usage figures where it sent them
// (-1 where it did not); cached_tokens is its
// usage.prompt_tokens_details.cached_tokens (prompt tokens it did not
// evaluate), -1 when absent.
struct ChatAnswer {
  std::string text;
  double ttft_s = 0, generation_s = 0;
  int content_chunks = 0;
  int prompt_tokens = -1, completion_tokens = -1, cached_tokens = -1;
};

// `timeout_s` bounds each step (connect, send, every read; not the name
// lookup, which is the system resolver's): a server that
// says nothing for that long fails the request. Fails with one line on a
// refused connection, an HTTP error status (with the server's message), a
// chunk that is not JSON or has no choices, an error event, or a stream that
// ends before [DONE].
Result<ChatAnswer> StreamChat(const Endpoint& endpoint, const ChatRequest& request,
                              double timeout_s);
// The id of the first model GET /models lists.
Result<std::string> FirstModel(const Endpoint& endpoint, double timeout_s);

}  // namespace kvtier::bench
