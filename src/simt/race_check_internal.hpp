// Internal: the stream-race checker's hooks for the runtime shim (race_check.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/simt/race_check.hpp"

namespace ember::simt::race {

// A vector clock: by stream serial number, how much of that stream's work is known complete or
// ordered before.
using VectorClock = std::vector<uint64_t>;
void merge(VectorClock& into, const VectorClock& from);

// Checks the accesses of an operation submitted to stream `stream` (its serial), whose
// knowledge is `clock` (clock[stream] is the operation's own stamp), and records them.
// Throws ember::Error naming both operations on a race.
void check(unsigned stream, const VectorClock& clock, const std::vector<Access>& accesses,
           const std::string& what);

// The bytes went back to the device (cudaFree, cuMemUnmap): their history ends.
void forget_range(const void* ptr, size_t bytes);

}  // namespace ember::simt::race
