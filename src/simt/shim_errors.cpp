// Error names and messages of the emulated runtime, and the per-thread last error.
#include "shim_internal.hpp"

namespace {
thread_local cudaError_t last_error = cudaSuccess;
}

namespace ember::simt {
void set_last_error(cudaError_t error) {
  last_error = error;
}
}  // namespace ember::simt

namespace ember::simt::shim {
cudaError_t fail(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}
}  // namespace ember::simt::shim

cudaError_t cudaGetLastError() {
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() {
  return last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define EMBER_SHIM_NAME(e) \
  case e:                  \
    return #e;
    EMBER_SHIM_NAME(cudaSuccess)
    EMBER_SHIM_NAME(cudaErrorStreamCaptureUnsupported)
    EMBER_SHIM_NAME(cudaErrorStreamCaptureInvalidated)
    EMBER_SHIM_NAME(cudaErrorStreamCaptureIsolation)
    EMBER_SHIM_NAME(cudaErrorStreamCaptureUnjoined)
    EMBER_SHIM_NAME(cudaErrorStreamCaptureImplicit)
    EMBER_SHIM_NAME(cudaErrorCapturedEvent)
    EMBER_SHIM_NAME(cudaErrorInvalidValue)
    EMBER_SHIM_NAME(cudaErrorMemoryAllocation)
    EMBER_SHIM_NAME(cudaErrorInitializationError)
    EMBER_SHIM_NAME(cudaErrorCudartUnloading)
    EMBER_SHIM_NAME(cudaErrorInvalidConfiguration)
    EMBER_SHIM_NAME(cudaErrorInvalidPitchValue)
    EMBER_SHIM_NAME(cudaErrorInvalidSymbol)
    EMBER_SHIM_NAME(cudaErrorInvalidDevicePointer)
    EMBER_SHIM_NAME(cudaErrorInvalidMemcpyDirection)
    EMBER_SHIM_NAME(cudaErrorInsufficientDriver)
    EMBER_SHIM_NAME(cudaErrorInvalidDeviceFunction)
    EMBER_SHIM_NAME(cudaErrorNoDevice)
    EMBER_SHIM_NAME(cudaErrorInvalidDevice)
    EMBER_SHIM_NAME(cudaErrorInvalidKernelImage)
    EMBER_SHIM_NAME(cudaErrorNoKernelImageForDevice)
    EMBER_SHIM_NAME(cudaErrorInvalidResourceHandle)
    EMBER_SHIM_NAME(cudaErrorIllegalState)
    EMBER_SHIM_NAME(cudaErrorNotReady)
    EMBER_SHIM_NAME(cudaErrorIllegalAddress)
    EMBER_SHIM_NAME(cudaErrorLaunchOutOfResources)
    EMBER_SHIM_NAME(cudaErrorLaunchTimeout)
    EMBER_SHIM_NAME(cudaErrorAssert)
    EMBER_SHIM_NAME(cudaErrorLaunchFailure)
    EMBER_SHIM_NAME(cudaErrorNotSupported)
    EMBER_SHIM_NAME(cudaErrorUnknown)
#undef EMBER_SHIM_NAME
  }
  return "unrecognized error code";
}

// The real runtime's wording.
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureUnjoined:
      return "capture was not joined back to the origin stream (a forked stream's work is "
             "left)";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorCudartUnloading:
      return "driver shutting down";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidPitchValue:
      return "invalid pitch argument";
    case cudaErrorInvalidSymbol:
      return "invalid device symbol";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidKernelImage:
      return "device kernel image is invalid";
    case cudaErrorNoKernelImageForDevice:
      return "no kernel image is available for execution on the device";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorIllegalState:
      return "the operation is not permitted when the stream is capturing";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorLaunchTimeout:
      return "the launch timed out and was terminated";
    case cudaErrorAssert:
      return "device-side assert triggered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorUnknown:
      return "unknown error";
  }
  return "unrecognized error code";
}
