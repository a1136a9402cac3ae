# Install rules: the ember library, its headers, and a relocatable emberConfig.cmake
# so that find_package(ember) gives the ember::ember target.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EMBER_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/ember")
install(TARGETS ember EXPORT emberTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/ember DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/ember)
install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${EMBER_CMAKE_INSTALL_DIR})
configure_package_config_file(cmake/emberConfig.cmake.in
                              "${PROJECT_BINARY_DIR}/emberConfig.cmake"
                              INSTALL_DESTINATION ${EMBER_CMAKE_INSTALL_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/emberConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/emberConfig.cmake"
              "${PROJECT_BINARY_DIR}/emberConfigVersion.cmake"
              cmake/FindNCCL.cmake cmake/FindCUDNN.cmake
        DESTINATION ${EMBER_CMAKE_INSTALL_DIR})
