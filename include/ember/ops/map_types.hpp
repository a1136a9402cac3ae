// The data types of ops::map (Values, Indexed, Sum/Max/Min, map parameters): defined at the
// kernels layer, which ops::map's kernels use, and used here under their ember::ops names.
#pragma once

#include "ember/kernels/map_types.cuh"
