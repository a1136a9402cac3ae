# Finds cuDNN. Defines CUDNN_FOUND and the imported target CUDNN::cudnn.
include(EmberFindVendorLibrary)
ember_find_vendor_library(CUDNN cudnn.h cudnn CUDNN::cudnn)
