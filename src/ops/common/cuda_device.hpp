// Properties of a CUDA device that ops' launch configurations need, queried once per device.
#pragma once

namespace ember::ops::cuda {

// The device's streaming multiprocessors. Cached per device (not under the SIMT emulator,
// whose tests change the emulated device's profile at run time).
int multiprocessor_count(int device);
int current_device();  // cudaGetDevice

}  // namespace ember::ops::cuda
