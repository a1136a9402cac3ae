// Pictures of the allocator's memory, as SVG:
// - snapshot_svg: a CachingAllocator::snapshot() (JSON), one row per segment, each block colored
//   by state, sizes in the tooltips. The allocator writes one next to its OOM snapshot
//   (EMBER_OOM_SNAPSHOT); memory_snapshot_svg draws a saved one.
// - timeline_svg: memory over time from a replayed trace (memory::replay's points): requested,
//   allocated and reserved bytes.
//
// Colors: allocated (blue); free inside a segment that also holds allocated blocks, i.e.
// fragmentation (orange); free in a segment that is entirely free, i.e. cache that empty_cache()
// would return (green); inactive, freed but waiting for stream events (purple); unmapped, a hole
// of an expandable segment whose pages went back to the device: address space without memory (a
// light grey, hatched and outlined gap). Names are escaped for XML: control characters become
// U+FFFD.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ember/memory/replay.hpp"

namespace ember::memory {

// An Error starting "not valid JSON: " or "not an allocator snapshot: " (naming the member) when
// `snapshot_json` is not one: {"segments":[{"address","size","stream","pool","expandable",
// "blocks":[{"address","size","requested","state"}]}]}, addresses and sizes as numbers or as
// strings holding one ("0x7f00" or decimal). `global_scale`: rows to one scale (else each row
// full width).
std::string snapshot_svg(std::string_view snapshot_json, const std::string& title,
                         bool global_scale = false);

// At most 1000 columns, each the maximum of its events, so peaks show.
std::string timeline_svg(const std::vector<MemoryPoint>& points, const std::string& title,
                         const std::string& config);

}  // namespace ember::memory
