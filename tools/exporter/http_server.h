// A minimal HTTP/1.1 server for kvtier-exporter: one listening socket, one
// request at a time, requests bounded in size and time, every response
// "Connection: close". Enough for Prometheus scrapes on loopback; not a
// general web server (a slow client holds the loop for at most
// kRequestTimeoutMs).
// Thread-safety: one thread calls Serve; the stop flag may be set from a
// signal handler.
#pragma once

#include <signal.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kvtier::exporter {

inline constexpr size_t kMaxRequestBytes = 8192;
inline constexpr int kRequestTimeoutMs = 5000;

struct ListenAddress {
  sockaddr_storage addr{};
  socklen_t len = 0;
  bool loopback = false;
};

// "127.0.0.1:9464", "[::1]:9464", "localhost:9464", "0.0.0.0:9464";
// port 0 picks a free port. False with *error naming the value.
bool ParseListenAddress(const std::string& spec, ListenAddress* out, std::string* error);
// "127.0.0.1:9464" or "[::1]:9464".
std::string FormatAddress(const sockaddr_storage& addr);

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
};

// Answers a GET or HEAD for `path` (without the query string).
using HttpHandler = std::function<HttpResponse(const std::string& path)>;

// The request line of a request head (what came before the blank line).
struct HttpRequest {
  std::string path;   // the target without its query string
  bool head = false;  // HEAD: answer without a body
};
// Parses the request line of `head`. False with *error set to the response
// to send (400 malformed, 405 method, 505 version).
bool ParseRequestHead(const std::string& head, HttpRequest* out, HttpResponse* error);

class HttpServer {
 public:
  static std::unique_ptr<HttpServer> Listen(const ListenAddress& address, std::string* error);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The address actually bound (the chosen port when asked for port 0).
  std::string BoundAddress() const;
  // Serves requests until *stop is set.
  void Serve(const HttpHandler& handler, const volatile sig_atomic_t* stop);

 private:
  explicit HttpServer(int fd) : fd_(fd) {}
  void HandleConnection(int fd, const HttpHandler& handler);
  int fd_;
};

}  // namespace kvtier::exporter
