// Internal: the CUDA runtime calls of the core layer, in one place. In a build
// without CUDA every function throws an Error saying so (device_count returns 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::cuda_backend {

int device_count(std::string* reason);  // 0, with the reason, when there is no usable GPU
// Copy queued on `stream` (a cudaStream_t); each side is host memory or device memory as
// flagged. It does not wait: a caller reading the host side synchronizes the stream.
void memcpy_async(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes,
                  void* stream);
// Queues on `stream` a fill of n elements of elem_size (1, 2, 4 or 8) bytes with the
// pattern at `value`.
void fill(void* dst, const void* value, size_t elem_size, int64_t n, int device, void* stream);

void* stream_create(int device);
void stream_destroy(void* stream) noexcept;
void stream_synchronize(void* stream);
// `waiter` waits (on the device) for the work queued on `waited` so far.
void stream_wait_stream(void* waiter, void* waited, int device);
void stream_wait_event(void* stream, void* event);
bool stream_capturing(void* stream);

void* event_create(int device);
void event_destroy(void* event) noexcept;
void event_record(void* event, void* stream, int device);
bool event_query(void* event);
void event_synchronize(void* event);
float event_elapsed_ms(void* start, void* end);

}  // namespace ember::cuda_backend
