// The emulated runtime API; the real toolkit splits it from cuda_runtime.h.
#pragma once

#include "cuda_runtime.h"
