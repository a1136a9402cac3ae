// Helpers shared by the emulated-backend tests of stream behaviour: lazy streams and the race
// checker for a test's length.
#pragma once

#include <cstdint>

#include "ember/core/error.hpp"
#include "ember/simt/race_check.hpp"
#include "ember/simt/shim.hpp"

namespace ember::testing {

// Lazy streams for the test's length, whatever EMBER_SIMT_STREAMS says.
struct LazyStreams {
  simt::StreamOptions saved = simt::stream_options();
  explicit LazyStreams(uint64_t seed = 1) {
    simt::set_stream_options({.mode = simt::StreamMode::deferred, .lazy = true, .seed = seed});
  }
  ~LazyStreams() { simt::set_stream_options(saved); }
};

// The stream-race checker on for the test's length.
struct RaceCheck {
  bool saved = simt::race_check_enabled();
  RaceCheck() { simt::set_race_check(true); }
  ~RaceCheck() { simt::set_race_check(saved); }
};

}  // namespace ember::testing
