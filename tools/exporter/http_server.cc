// A minimal HTTP/1.1 server for kvtier-exporter (see http_server.h).
#include "tools/exporter/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace kvtier::exporter {
namespace {

using Clock = std::chrono::steady_clock;

int MsLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

const char* StatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Internal Server Error";
  }
}

bool WriteAll(int fd, const std::string& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    const int left = MsLeft(deadline);
    if (left == 0) return false;
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, left);
  }
  return true;
}

void Respond(int fd, const HttpResponse& r, bool head, Clock::time_point deadline) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + StatusText(r.status) + "\r\n";
  out += "Content-Type: " +
         (r.content_type.empty() ? std::string("text/plain; charset=utf-8") : r.content_type) +
         "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  if (r.status == 405) out += "Allow: GET, HEAD\r\n";
  out += "Connection: close\r\n\r\n";
  if (!head) out += r.body;
  WriteAll(fd, out, deadline);
}

HttpResponse Error(int status, const std::string& text) { return {status, "", text + "\n"}; }

}  // namespace

bool ParseListenAddress(const std::string& spec, ListenAddress* out, std::string* error) {
  auto fail = [&](const std::string& why) {
    *error = "--listen " + spec + ": " + why +
             " (expected HOST:PORT such as 127.0.0.1:9464 or [::1]:9464)";
    return false;
  };
  std::string host, port;
  if (!spec.empty() && spec[0] == '[') {
    const size_t close = spec.find(']');
    if (close == std::string::npos || close + 1 >= spec.size() || spec[close + 1] != ':')
      return fail("bad IPv6 form");
    host = spec.substr(1, close - 1);
    port = spec.substr(close + 2);
  } else {
    const size_t colon = spec.rfind(':');
    if (colon == std::string::npos) return fail("no port");
    host = spec.substr(0, colon);
    port = spec.substr(colon + 1);
  }
  char* end = nullptr;
  errno = 0;
  const long p = strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || errno != 0 || p < 0 || p > 65535)
    return fail("port " + port + " is not 0..65535");
  if (host == "localhost") host = "127.0.0.1";
  *out = ListenAddress();
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out->addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out->addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(p));
    out->len = sizeof *v4;
    out->loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(p));
    out->len = sizeof *v6;
    out->loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
  } else {
    return fail("host " + host + " is not a numeric address or localhost");
  }
  return true;
}

std::string FormatAddress(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&addr);
  inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));
}

std::unique_ptr<HttpServer> HttpServer::Listen(const ListenAddress& address, std::string* error) {
  const std::string where = FormatAddress(address.addr);
  int fd = socket(address.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = where + ": cannot create a socket: " + strerror(errno);
    return nullptr;
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address.addr), address.len) != 0) {
    *error = where + ": cannot listen: " + strerror(errno) +
             " (is another exporter running? choose another --listen port)";
    close(fd);
    return nullptr;
  }
  if (listen(fd, 16) != 0) {
    *error = where + ": cannot listen: " + strerror(errno);
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<HttpServer>(new HttpServer(fd));
}

HttpServer::~HttpServer() { close(fd_); }

std::string HttpServer::BoundAddress() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return FormatAddress(addr);
}

void HttpServer::Serve(const HttpHandler& handler, const volatile sig_atomic_t* stop) {
  while (!*stop) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 500) <= 0) continue;  // timeout or a signal: look at *stop
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) continue;
    HandleConnection(client, handler);
    close(client);
  }
}

void HttpServer::HandleConnection(int fd, const HttpHandler& handler) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  std::string request;
  size_t header_end = std::string::npos;
  while ((header_end = request.find("\r\n\r\n")) == std::string::npos &&
         (header_end = request.find("\n\n")) == std::string::npos) {
    if (request.size() >= kMaxRequestBytes) {
      Respond(fd, Error(431, "request headers over " + std::to_string(kMaxRequestBytes) + " bytes"),
              false, deadline);
      return;
    }
    char buf[2048];
    const ssize_t n = recv(fd, buf, std::min(sizeof buf, kMaxRequestBytes - request.size()), 0);
    if (n > 0) {
      request.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      return;  // client gone
    const int left = MsLeft(deadline);
    if (left == 0) return;  // too slow: drop it, the loop must go on
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, left);
  }
  HttpRequest parsed;
  HttpResponse error;
  if (!ParseRequestHead(request.substr(0, header_end), &parsed, &error)) {
    Respond(fd, error, false, deadline);
    return;
  }
  Respond(fd, handler(parsed.path), parsed.head, deadline);
  shutdown(fd, SHUT_WR);
}

bool ParseRequestHead(const std::string& head, HttpRequest* out, HttpResponse* error) {
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos) {
    *error = Error(400, "malformed request line");
    return false;
  }
  const std::string method = line.substr(0, sp1);
  const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string version = line.substr(sp2 + 1);
  if (version.rfind("HTTP/1.", 0) != 0) {
    *error = Error(505, "only HTTP/1.x is spoken here");
    return false;
  }
  out->head = method == "HEAD";
  if (method != "GET" && !out->head) {
    *error = Error(405, "only GET and HEAD");
    return false;
  }
  out->path = target.substr(0, target.find('?'));
  return true;
}

}  // namespace kvtier::exporter
