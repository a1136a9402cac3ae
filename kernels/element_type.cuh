// The element types kernels read and write: ember::DType's floating members (f32, f16, bf16),
// the one dtype codec of host and device code (ember/kernels/map.cuh decodes and encodes them).
// Launchers pass a DType; kernels treat anything but f16 and bf16 as f32.
#pragma once

#include "ember/core/dtype.hpp"
