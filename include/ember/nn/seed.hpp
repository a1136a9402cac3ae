// Default initialization seeds. A layer built without an explicit seed takes the next value of
// a process-wide sequence, so two layers of one shape start different, and a program that
// builds its model in the same order gets the same weights on every run.
#pragma once

#include <cstdint>

namespace ember::nn {

// The next default seed (thread-safe).
uint64_t next_default_seed();
// Restarts the sequence (as torch.manual_seed does for PyTorch's default initialization).
void set_default_seed(uint64_t seed);

}  // namespace ember::nn
