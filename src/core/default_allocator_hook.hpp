// The seam between core and memory: core declares the factory allocator_for
// calls for a device's first allocator; the memory layer defines it
// (src/memory/default_allocator.cpp, a CachingAllocator from EMBER_ALLOC_CONF).
// Core includes no memory header. A link-time definition rather than a
// registrar object run at static initialisation: ember is a static archive, and
// the linker drops archive members nothing references, registrars included.
#pragma once

#include <memory>

#include "ember/core/allocator.hpp"

namespace ember::detail {

std::shared_ptr<Allocator> make_device_allocator(Device device);

}  // namespace ember::detail
