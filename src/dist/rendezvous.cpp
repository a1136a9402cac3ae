// The TCP rendezvous of torchrun-style launches (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
// rank 0 listens on MASTER_PORT and hands every other rank a few bytes (the NCCL unique id);
// nothing else travels over it. Every step has the deadline: a rank that never comes is an
// Error naming the address, the ranks still missing and the seconds.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "dist/backend.hpp"

namespace ember::dist::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x656d6272;  // "embr": a stray connection is not a rank

struct Socket {
  int fd = -1;
  explicit Socket(int f = -1) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  Socket(const Socket&) = delete;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

int millis_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

// Waits until fd is ready for `events`; false at the deadline.
bool ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, millis_left(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Moves all n bytes with `io(done)`, which sends or receives from byte `done` on and returns
// what ::send or ::recv does, each time fd is ready for `events`; false on a closed socket, an
// error or the deadline.
template <class Io>
bool transfer_all(int fd, short events, size_t n, Clock::time_point deadline, Io io) {
  size_t done = 0;
  while (done < n) {
    if (!ready(fd, events, deadline)) return false;
    const ssize_t k = io(done);
    if (k <= 0) {
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return false;
    }
    done += static_cast<size_t>(k);
  }
  return true;
}

bool send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  return transfer_all(fd, POLLOUT, n, deadline,
                      [&](size_t done) { return ::send(fd, p + done, n - done, MSG_NOSIGNAL); });
}

bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  return transfer_all(fd, POLLIN, n, deadline,
                      [&](size_t done) { return ::recv(fd, p + done, n - done, 0); });
}

std::string where(const Launch& l) {
  return fmt::format("{}:{}", l.master_addr, l.master_port);
}

void serve(const Launch& l, const void* data, size_t n, Clock::time_point deadline,
           double timeout) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(l.master_port);
  EMBER_CHECK(::getaddrinfo(nullptr, port.c_str(), &hints, &found) == 0 && found,
              "dist: rank 0 cannot listen on port {}", l.master_port);
  Socket listener(::socket(found->ai_family, found->ai_socktype, 0));
  const int yes = 1;
  ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  const bool bound = listener.fd >= 0 &&
                     ::bind(listener.fd, found->ai_addr, found->ai_addrlen) == 0 &&
                     ::listen(listener.fd, 128) == 0;
  const int bind_errno = errno;
  ::freeaddrinfo(found);
  EMBER_CHECK(bound, "dist: rank 0 cannot listen on MASTER_PORT={} ({}); is another job using it?",
              l.master_port, std::strerror(bind_errno));
  std::set<int> missing;
  for (int r = 1; r < l.world_size; ++r) missing.insert(r);
  while (!missing.empty()) {
    if (!ready(listener.fd, POLLIN, deadline)) {
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      EMBER_THROW(
          "dist: the rendezvous on {} timed out after {} s on rank 0 of {}: rank(s) {} "
          "never connected (check MASTER_ADDR/MASTER_PORT on every rank, and that they "
          "were started)",
          where(l), timeout, l.world_size, list);
    }
    Socket peer(::accept(listener.fd, nullptr, nullptr));
    if (peer.fd < 0) continue;
    uint32_t hello[2] = {0, 0};
    if (!recv_all(peer.fd, hello, sizeof(hello), deadline) || hello[0] != kMagic) continue;
    const int rank = static_cast<int>(hello[1]);
    if (!missing.contains(rank)) continue;  // not a rank we wait for: ignored
    if (send_all(peer.fd, data, n, deadline)) missing.erase(rank);
  }
}

void join(const Launch& l, void* data, size_t n, Clock::time_point deadline, double timeout) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(l.master_port);
  std::string last_error = "no attempt";
  while (Clock::now() < deadline) {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(l.master_addr.c_str(), port.c_str(), &hints, &found);
    if (rc != 0 || !found) {
      last_error = fmt::format("cannot resolve '{}': {}", l.master_addr, ::gai_strerror(rc));
    } else {
      Socket s(::socket(found->ai_family, found->ai_socktype, 0));
      const bool connected = s.fd >= 0 && ::connect(s.fd, found->ai_addr, found->ai_addrlen) == 0;
      last_error = connected ? "rank 0 closed the connection" : std::strerror(errno);
      ::freeaddrinfo(found);
      const uint32_t hello[2] = {kMagic, static_cast<uint32_t>(l.rank)};
      if (connected && send_all(s.fd, hello, sizeof(hello), deadline) &&
          recv_all(s.fd, data, n, deadline)) {
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 may not listen yet
  }
  EMBER_THROW(
      "dist: rank {} of {} could not get the rendezvous data from rank 0 at {} within {} "
      "s ({}); is rank 0 running, and MASTER_ADDR/MASTER_PORT the same on every rank?",
      l.rank, l.world_size, where(l), timeout, last_error);
}

}  // namespace

void tcp_rendezvous_broadcast(const Launch& launch, void* data, size_t n, double timeout) {
  EMBER_CHECK(!launch.master_addr.empty() && launch.master_port > 0,
              "dist: the rendezvous needs MASTER_ADDR and MASTER_PORT");
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout));
  if (launch.world_size == 1) return;
  if (launch.rank == 0) {
    serve(launch, data, n, deadline, timeout);
  } else {
    join(launch, data, n, deadline, timeout);
  }
}

}  // namespace ember::dist::detail
