# Every third-party dependency is found here, from Debian packages (deps/debian-packages.txt).
find_package(Threads REQUIRED)
find_package(OpenSSL 3 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Protobuf REQUIRED)
find_package(PkgConfig REQUIRED)

pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(LZ4 REQUIRED IMPORTED_TARGET liblz4)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
add_library(zstd INTERFACE)
target_link_libraries(zstd INTERFACE PkgConfig::ZSTD)
add_library(lz4 INTERFACE)
target_link_libraries(lz4 INTERFACE PkgConfig::LZ4)
add_library(xxhash INTERFACE)
target_link_libraries(xxhash INTERFACE PkgConfig::XXHASH)

# Standalone asio (header only) with coroutines.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(asio INTERFACE)
target_include_directories(asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(asio INTERFACE Threads::Threads)

find_package(CLI11 REQUIRED)

# spdlog carries log lines to their sink (stderr or a file), thread-safe; the events' text and
# JSON forms are ours (metrics/log.h), since spdlog has no structured fields.
find_package(spdlog REQUIRED)

# prometheus-cpp (core only) holds the metrics and writes the text exposition format; the HTTP
# side is ours (metrics/http_server.h), since /metrics shares its server with the fleet page.
find_package(prometheus-cpp CONFIG REQUIRED COMPONENTS core)

# cpp-httplib serves /metrics. Debian ships it compiled (libcpp-httplib.so): the header only
# declares the server, and its classes change shape with the CPPHTTPLIB_* defines the library was
# built with, so both the library and those defines come from pkg-config.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
add_library(httplib INTERFACE)
target_link_libraries(httplib INTERFACE PkgConfig::HTTPLIB Threads::Threads)

# libcurl reads models from HTTP(S) origins (src/origin/http_client.h says why libcurl).
find_package(CURL REQUIRED)

if(WC_BUILD_TESTS OR WC_BUILD_BENCH)
  find_package(GTest REQUIRED)
endif()
if(WC_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# UCX (libucx-dev) for the UCX transport (docs/transport_ucx.md). AUTO: used when pkg-config finds
# it; ON: required; OFF: never (the transport is absent and `--transport auto` means TCP).
set(WEIGHTCAST_UCX "AUTO" CACHE STRING "Build the UCX transport: AUTO, ON or OFF")
set_property(CACHE WEIGHTCAST_UCX PROPERTY STRINGS AUTO ON OFF)
set(WC_HAVE_UCX OFF)
if(NOT WEIGHTCAST_UCX STREQUAL "OFF")
  if(WEIGHTCAST_UCX STREQUAL "ON")
    pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
  else()
    pkg_check_modules(UCX IMPORTED_TARGET ucx)
  endif()
  if(UCX_FOUND)
    set(WC_HAVE_UCX ON)
  endif()
endif()
message(STATUS "weightcast: UCX transport ${WC_HAVE_UCX} (WEIGHTCAST_UCX=${WEIGHTCAST_UCX})")
