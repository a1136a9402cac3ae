#include "ember/dist/launch.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "ember/core/error.hpp"

namespace ember::dist {
namespace {

using Getenv = std::function<const char*(const char*)>;

int integer(const Getenv& getenv, const char* name, const char* launcher) {
  const char* text = getenv(name);
  EMBER_CHECK(text != nullptr, "dist: {} is set but {} is not: a {} launch sets both", name, name,
              launcher);
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  EMBER_CHECK(*text != '\0' && *end == '\0' && errno == 0 && value >= 0 &&
                  value <= std::numeric_limits<int>::max(),
              "dist: {}='{}' is not a non-negative integer ({} launch)", name, text, launcher);
  return static_cast<int>(value);
}

struct Names {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
};

Launch read(const Getenv& getenv, const Names& n) {
  // Every variable of the set must be present: the first message names the missing one.
  for (const char* name : {n.rank, n.size}) {
    EMBER_CHECK(getenv(name) != nullptr,
                "dist: the {} launch variables are incomplete: {} is not set (need {} and {})",
                n.launcher, name, n.rank, n.size);
  }
  Launch l;
  l.launcher = n.launcher;
  l.rank = integer(getenv, n.rank, n.launcher);
  l.world_size = integer(getenv, n.size, n.launcher);
  EMBER_CHECK(l.world_size >= 1, "dist: {}={} must be at least 1", n.size, l.world_size);
  EMBER_CHECK(l.rank < l.world_size, "dist: {}={} is not below {}={}", n.rank, l.rank, n.size,
              l.world_size);
  l.local_rank = getenv(n.local_rank) ? integer(getenv, n.local_rank, n.launcher) : 0;
  return l;
}

}  // namespace

Launch detect_launch(const Getenv& getenv) {
  if (getenv("OMPI_COMM_WORLD_RANK") || getenv("OMPI_COMM_WORLD_SIZE")) {
    return read(getenv, {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_RANK"});
  }
  if (getenv("SLURM_PROCID") || getenv("SLURM_NTASKS")) {
    return read(getenv, {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"});
  }
  if (getenv("RANK") || getenv("WORLD_SIZE")) {
    Launch l = read(getenv, {"env", "RANK", "WORLD_SIZE", "LOCAL_RANK"});
    if (l.world_size > 1) {
      const char* addr = getenv("MASTER_ADDR");
      EMBER_CHECK(addr != nullptr && *addr != '\0',
                  "dist: WORLD_SIZE={} needs MASTER_ADDR (the rendezvous host, rank 0's address)",
                  l.world_size);
      l.master_addr = addr;
      EMBER_CHECK(getenv("MASTER_PORT") != nullptr,
                  "dist: WORLD_SIZE={} needs MASTER_PORT (the rendezvous port on MASTER_ADDR)",
                  l.world_size);
      l.master_port = integer(getenv, "MASTER_PORT", "env");
      EMBER_CHECK(l.master_port >= 1 && l.master_port <= 65535,
                  "dist: MASTER_PORT={} is not a TCP port (1 to 65535)", l.master_port);
    }
    return l;
  }
  return Launch{};
}

Launch detect_launch() {
  return detect_launch([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace ember::dist
