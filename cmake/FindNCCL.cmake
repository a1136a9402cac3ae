# Finds NCCL. Defines NCCL_FOUND and the imported target NCCL::nccl.
include(EmberFindVendorLibrary)
ember_find_vendor_library(NCCL nccl.h nccl NCCL::nccl)
