// Fuzz target: kvtier-exporter's request parsing (ParseRequestHead in
// tools/exporter/http_server.cc), on whatever a client sends before the
// blank line. A request is accepted as GET or HEAD of a path without its
// query string, or refused with a 4xx/5xx answer; nothing crashes.
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "tools/exporter/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string head(reinterpret_cast<const char*>(data), size);
  kvtier::exporter::HttpRequest request;
  kvtier::exporter::HttpResponse error;
  if (kvtier::exporter::ParseRequestHead(head, &request, &error)) {
    FUZZ_CHECK(request.path.find('?') == std::string::npos);
    FUZZ_CHECK(head.rfind(request.head ? "HEAD " : "GET ", 0) == 0);
  } else {
    FUZZ_CHECK(error.status >= 400 && error.status < 600);
    FUZZ_CHECK(!error.body.empty());
  }
  return 0;
}
