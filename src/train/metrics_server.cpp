// train::Metrics::serve: GET /metrics over HTTP, with Debian's cpp-httplib where the build found
// it (EMBER_WITH_HTTPLIB), on a thread of its own.
#include "train/metrics_impl.hpp"

#include "ember/core/error.hpp"

#if EMBER_WITH_HTTPLIB
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#endif

namespace ember::train {

#if EMBER_WITH_HTTPLIB

namespace {
struct Server {
  httplib::Server http;
  std::thread thread;
  ~Server() {
    http.stop();
    if (thread.joinable()) thread.join();
  }
};

// Whether `port` is free: cpp-httplib binds with SO_REUSEPORT, which would let a second server
// share a port another process (or Metrics) serves; a plain bind says whether it is taken.
bool port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return true;  // let the server's own bind decide
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return free;
}

}  // namespace

int start_server(Metrics::Impl& impl, int port, std::function<std::string()> text) {
  EMBER_CHECK(impl.server == nullptr, "train::Metrics::serve: already serving");
  EMBER_CHECK(port == 0 || port_free(port),
              "train::Metrics::serve: cannot listen on port {} (in use)", port);
  auto server = std::make_shared<Server>();
  server->http.Get("/metrics", [text](const httplib::Request&, httplib::Response& response) {
    response.set_content(text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  const int bound = port == 0 ? server->http.bind_to_any_port("0.0.0.0")
                              : (server->http.bind_to_port("0.0.0.0", port) ? port : -1);
  EMBER_CHECK(bound > 0, "train::Metrics::serve: cannot listen on port {} (in use?)", port);
  server->thread = std::thread([s = server.get()] { s->http.listen_after_bind(); });
  impl.server = server;
  return bound;
}

void stop_server(Metrics::Impl& impl) {
  impl.server.reset();
}

#else

int start_server(Metrics::Impl&, int, std::function<std::string()>) {
  EMBER_THROW(
      "train::Metrics::serve: this build of ember has no HTTP server (cpp-httplib was "
      "not found; Debian: libcpp-httplib-dev); write_file serves node_exporter instead");
}

void stop_server(Metrics::Impl&) {}

#endif

}  // namespace ember::train
