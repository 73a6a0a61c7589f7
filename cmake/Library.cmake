# libweightcast.so, the library a C++ program links (docs/cpp_api.md): the public API of
# include/weightcast/ with every internal layer it needs linked in privately. Only the public
# symbols are exported (weightcast.map), so a program that links it needs none of our
# dependencies' headers or link flags (protobuf, OpenSSL, zstd, lz4, xxhash, asio stay inside),
# and their symbols cannot clash with its own copies of those libraries.
#
# Installed with the headers, a CMake package (find_package(weightcast) ->
# weightcast::weightcast) and weightcast.pc, all relocatable: `cmake --install build/release
# --prefix DIR` works for any DIR.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The target is weightcast_lib because `weightcast` is the CLI; the file is libweightcast.so.
set(wc_lib_anchor ${PROJECT_BINARY_DIR}/gen/weightcast_lib.cc)
file(WRITE ${wc_lib_anchor}.in
  "// libweightcast.so is wc_client and the layers it uses (cmake/Library.cmake).\n")
configure_file(${wc_lib_anchor}.in ${wc_lib_anchor} COPYONLY)
add_library(weightcast_lib SHARED ${wc_lib_anchor})
add_library(weightcast::weightcast ALIAS weightcast_lib)
set_target_properties(weightcast_lib PROPERTIES
  OUTPUT_NAME weightcast
  EXPORT_NAME weightcast
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/weightcast.map)
target_include_directories(weightcast_lib PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(weightcast_lib PUBLIC cxx_std_20)
# The whole client layer (every public function lives there or in util/status.cc, which it
# uses); the layers below come in as the client needs them.
target_link_libraries(weightcast_lib PRIVATE $<LINK_LIBRARY:WHOLE_ARCHIVE,wc_client>)
target_link_options(weightcast_lib PRIVATE
  -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/weightcast.map -Wl,--no-undefined)

install(TARGETS weightcast_lib EXPORT weightcastTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/weightcast
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
set(wc_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/weightcast)
install(EXPORT weightcastTargets NAMESPACE weightcast:: DESTINATION ${wc_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/weightcastConfig.cmake.in
  ${PROJECT_BINARY_DIR}/weightcastConfig.cmake INSTALL_DESTINATION ${wc_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/weightcastConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/weightcastConfig.cmake
  ${PROJECT_BINARY_DIR}/weightcastConfigVersion.cmake DESTINATION ${wc_cmake_dir})
configure_file(${PROJECT_SOURCE_DIR}/cmake/weightcast.pc.in ${PROJECT_BINARY_DIR}/weightcast.pc
  @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/weightcast.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
