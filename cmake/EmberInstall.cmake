# Install rules: the ember library, its headers, and a relocatable emberConfig.cmake
# so that find_package(ember) gives the ember::ember target.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EMBER_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/ember")
install(TARGETS ember EXPORT emberTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# include/ember/kernels is a link to the top-level kernels/ (the device code, llm.c's llmc/ style):
# installed as the real folder ember/kernels/, not as the link.
install(DIRECTORY include/ember DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        REGEX "/include/ember/kernels$" EXCLUDE)
install(DIRECTORY kernels/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember/kernels)
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/ember)
install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${EMBER_CMAKE_INSTALL_DIR})
configure_package_config_file(cmake/emberConfig.cmake.in
                              "${PROJECT_BINARY_DIR}/emberConfig.cmake"
                              INSTALL_DESTINATION ${EMBER_CMAKE_INSTALL_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/emberConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/emberConfig.cmake"
              "${PROJECT_BINARY_DIR}/emberConfigVersion.cmake"
        DESTINATION ${EMBER_CMAKE_INSTALL_DIR})

# pkg-config: ember is a shared library with private dependencies; a program needs fmt and
# OpenMP besides it (the run path lets it find libember.so wherever the prefix is).
if(EMBER_WITH_CUDA)
  set(EMBER_WITH_CUDA_01 1)
else()
  set(EMBER_WITH_CUDA_01 0)
endif()
file(RELATIVE_PATH EMBER_PC_UP "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" EMBER_PC_UP "${EMBER_PC_UP}")
configure_file(cmake/ember.pc.in "${PROJECT_BINARY_DIR}/ember.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/ember.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The build tree works as a package too: find_package(ember) with ember_DIR=<build dir>.
export(EXPORT emberTargets NAMESPACE ember:: FILE "${PROJECT_BINARY_DIR}/emberTargets.cmake")

# The tools: installed as programs.
foreach(tool memory_snapshot_svg loss_curve_png tokenize_text bench_allocator bench_matmul)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    # $ORIGIN/../lib finds libember.so in the prefix and in the build tree alike (<build>/lib):
    # no install-time rewrite, so no padded (current-directory) run path entry.
    set_target_properties(${tool} PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}"
                                             BUILD_WITH_INSTALL_RPATH ON)
  endif()
endforeach()
