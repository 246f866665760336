#include "tools/bench/openai_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

namespace kvtier::bench {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// One connection whose every step is bounded by the timeout: Beast's
// tcp_stream times out asynchronous operations only, so each step is an
// asynchronous one run to completion here.
class Connection {
 public:
  explicit Connection(double timeout_s)
      : stream_(io_),
        timeout_(std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(timeout_s))) {}

  Status Connect(const Endpoint& e) {
    net::ip::tcp::resolver resolver(io_);
    beast::error_code ec;
    auto found = resolver.resolve(e.host, e.port, ec);
    if (ec) return Status::Errorf("%s: %s", e.host.c_str(), ec.message().c_str());
    ec = Run([&](auto done) { stream_.async_connect(found, done); });
    if (ec)
      return Status::Errorf("cannot connect to %s:%s: %s", e.host.c_str(), e.port.c_str(),
                            Why(ec).c_str());
    return Status::Ok();
  }
  beast::error_code Send(http::request<http::string_body>& req) {
    return Run([&](auto done) { http::async_write(stream_, req, done); });
  }
  template <class Parser>
  beast::error_code ReadHeader(Parser& parser) {
    return Run([&](auto done) { http::async_read_header(stream_, buffer_, parser, done); });
  }
  template <class Parser>
  beast::error_code ReadSome(Parser& parser) {
    return Run([&](auto done) { http::async_read_some(stream_, buffer_, parser, done); });
  }
  std::string Why(const beast::error_code& ec) const {
    if (ec == beast::error::timeout) {
      char buf[64];
      snprintf(buf, sizeof buf, "no answer for %g s (stalled)", timeout_.count() / 1e9);
      return buf;
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == http::error::partial_message) {
      return "the server closed the connection";
    }
    return ec.message();
  }

 private:
  template <class Start>
  beast::error_code Run(Start start) {
    beast::error_code result = net::error::would_block;
    stream_.expires_after(timeout_);
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io_.restart();
    io_.run();
    return result;
  }

  net::io_context io_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::chrono::nanoseconds timeout_;
};

http::request<http::string_body> MakeRequest(http::verb verb, const Endpoint& e,
                                             const std::string& path, std::string body) {
  http::request<http::string_body> req{verb, e.base + path, 11};
  req.set(http::field::host, e.host + ":" + e.port);
  req.set(http::field::user_agent, "kvtier-bench");
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.body() = std::move(body);
  }
  req.prepare_payload();
  return req;
}

// The server's message from an error body, else the body's first line.
std::string ErrorText(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
    if (e.is_string()) return e.get<std::string>();
  }
  std::string line = body.substr(0, body.find('\n'));
  return line.size() > 200 ? line.substr(0, 200) + "..." : line;
}

std::string Clip(const std::string& s) { return s.size() > 120 ? s.substr(0, 120) + "..." : s; }

// Reads the whole body of a response whose header is read (small bodies).
Status ReadBody(Connection& c, http::response_parser<http::string_body>& parser,
                const std::string& what) {
  while (!parser.is_done()) {
    beast::error_code ec = c.ReadSome(parser);
    if (ec) return Status::Errorf("%s: %s", what.c_str(), c.Why(ec).c_str());
  }
  return Status::Ok();
}

// Takes one server-sent event's data line into `answer`; sets `*done` at
// [DONE].
Status TakeEvent(const std::string& data, Clock::time_point start, ChatAnswer* answer, bool* done) {
  if (data == "[DONE]") {
    *done = true;
    return Status::Ok();
  }
  json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Errorf("a chunk is not a JSON object: %s", Clip(data).c_str());
  }
  if (j.contains("error"))
    return Status::Errorf("the server sent an error: %s", ErrorText(data).c_str());
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    auto count = [](const json& o, const char* key) {
      return o.contains(key) && o[key].is_number_integer() ? o[key].get<int>() : -1;
    };
    answer->prompt_tokens = count(u, "prompt_tokens");
    answer->completion_tokens = count(u, "completion_tokens");
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
      answer->cached_tokens = count(u["prompt_tokens_details"], "cached_tokens");
    }
  }
  if (!j.contains("choices") || !j["choices"].is_array()) {
    return Status::Errorf("a chunk has no \"choices\" list: %s", Clip(data).c_str());
  }
  for (const json& choice : j["choices"]) {
    if (!choice.is_object() || !choice.contains("delta")) continue;
    const json& delta = choice["delta"];
    if (!delta.is_object() || !delta.contains("content") || !delta["content"].is_string()) continue;
    const std::string piece = delta["content"].get<std::string>();
    if (piece.empty()) continue;
    if (answer->content_chunks++ == 0) {
      answer->ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
    }
    answer->text += piece;
  }
  return Status::Ok();
}

}  // namespace

Result<Endpoint> ParseEndpoint(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    return Status::Errorf("--endpoint %s: expected http://HOST[:PORT][/PATH] (https is not spoken)",
                          url.c_str());
  }
  Endpoint e;
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  e.base = slash == std::string::npos ? "" : rest.substr(slash);
  while (!e.base.empty() && e.base.back() == '/') e.base.pop_back();
  const size_t colon = authority.rfind(':');
  if (colon != std::string::npos) {
    e.port = authority.substr(colon + 1);
    authority.resize(colon);
    char* end = nullptr;
    const long port = strtol(e.port.c_str(), &end, 10);
    if (e.port.empty() || *end != '\0' || port < 1 || port > 65535) {
      return Status::Errorf("--endpoint %s: the port must be 1-65535", url.c_str());
    }
  }
  if (authority.empty()) return Status::Errorf("--endpoint %s: no host", url.c_str());
  e.host = authority;
  return e;
}

Result<std::string> FirstModel(const Endpoint& endpoint, double timeout_s) {
  const std::string what = "GET " + endpoint.Url() + "/models";
  Connection c(timeout_s);
  if (Status s = c.Connect(endpoint); !s.ok())
    return Status::Errorf("%s: %s", what.c_str(), s.message().c_str());
  auto req = MakeRequest(http::verb::get, endpoint, "/models", "");
  if (beast::error_code ec = c.Send(req))
    return Status::Errorf("%s: %s", what.c_str(), c.Why(ec).c_str());
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  if (beast::error_code ec = c.ReadHeader(parser)) {
    return Status::Errorf("%s: %s", what.c_str(), c.Why(ec).c_str());
  }
  if (Status s = ReadBody(c, parser, what); !s.ok()) return s;
  const auto& res = parser.get();
  if (res.result() != http::status::ok) {
    return Status::Errorf("%s: HTTP %u: %s", what.c_str(), res.result_int(),
                          ErrorText(res.body()).c_str());
  }
  json j = json::parse(res.body(), nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string()) {
    return Status::Errorf("%s: no model listed (expected {\"data\": [{\"id\": ...}]}): %s",
                          what.c_str(), Clip(res.body()).c_str());
  }
  return j["data"][0]["id"].get<std::string>();
}

Result<ChatAnswer> StreamChat(const Endpoint& endpoint, const ChatRequest& request,
                              double timeout_s) {
  json body = {{"model", request.model},
               {"max_tokens", request.max_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"messages", json::array()}};
  for (const ChatMessage& m : request.messages) {
    body["messages"].push_back({{"role", m.role}, {"content", m.content}});
  }
  const auto start = Clock::now();
  Connection c(timeout_s);
  if (Status s = c.Connect(endpoint); !s.ok()) return s;
  // Answers of random-weight models hold any bytes: replace what is not UTF-8.
  auto req = MakeRequest(http::verb::post, endpoint, "/chat/completions",
                         body.dump(-1, ' ', false, json::error_handler_t::replace));
  if (beast::error_code ec = c.Send(req)) return Status::Error(c.Why(ec));
  http::response_parser<http::buffer_body> parser;
  // A streamed answer has no size limit (Boost 1.74 compares a Content-Length
  // with boost::none as exceeding it: no limit is the largest one).
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (beast::error_code ec = c.ReadHeader(parser)) return Status::Error(c.Why(ec));
  const unsigned status = parser.get().result_int();
  ChatAnswer answer;
  std::string pending;  // bytes of the body not yet split into lines
  bool done = false;
  char buf[16384];
  while (!done && !parser.is_done()) {
    parser.get().body().data = buf;
    parser.get().body().size = sizeof buf;
    beast::error_code ec = c.ReadSome(parser);
    if (ec == http::error::need_buffer) ec = {};
    pending.append(buf, sizeof buf - parser.get().body().size);
    if (ec) {
      if (status != 200) break;  // the status says more than the cut
      return Status::Errorf("%s after %d content chunks, before [DONE]", c.Why(ec).c_str(),
                            answer.content_chunks);
    }
    if (status != 200) continue;  // an error body: read it whole
    size_t at;
    while (!done && (at = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, at);
      pending.erase(0, at + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || line[0] == ':') continue;  // event end, comment
      if (line.rfind("data:", 0) != 0) continue;     // event:, id:, retry:
      std::string data = line.substr(5);
      if (!data.empty() && data[0] == ' ') data.erase(0, 1);
      if (Status s = TakeEvent(data, start, &answer, &done); !s.ok()) return s;
    }
  }
  if (status != 200) return Status::Errorf("HTTP %u: %s", status, ErrorText(pending).c_str());
  if (!done) {
    return Status::Errorf("the stream ended after %d content chunks, before [DONE]",
                          answer.content_chunks);
  }
  if (answer.content_chunks == 0) return Status::Error("the answer held no content");
  answer.generation_s = std::chrono::duration<double>(Clock::now() - start).count() - answer.ttft_s;
  return answer;
}

}  // namespace kvtier::bench
