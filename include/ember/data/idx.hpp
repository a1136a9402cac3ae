// The IDX file format of the MNIST distribution, and MNIST itself.
// IDX: two zero bytes, a type code, the number of dimensions, then each dimension as a
// big-endian uint32, then the data, row-major, multi-byte values big-endian.
#pragma once

#include <string>

#include "ember/core/tensor.hpp"
#include "ember/data/dataset.hpp"

namespace ember::data {

// Reads an IDX file into a cpu tensor: type 0x08 gives u8, 0x0C i32, 0x0D f32 (the other IDX
// types, i8, i16 and f64, have no ember dtype and are rejected). Throws an Error naming the file
// when it is missing, unreadable, malformed, truncated or followed by extra bytes.
Tensor read_idx(const std::string& path);

// Loads MNIST from the uncompressed files in `dir`: train-images-idx3-ubyte and
// train-labels-idx1-ubyte when `train`, else t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte.
// inputs: f32 [N, rows * cols] scaled to [0, 1]; labels: i32 [N]; num_classes: 10.
Dataset load_mnist(const std::string& dir, bool train);

}  // namespace ember::data
