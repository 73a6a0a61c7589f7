# wc_add_layer(NAME DEPS ...): a static library wc_NAME from src/NAME/*.cc (and any *.proto there).
# Globbing keeps adding a file to a layer a one-step change; CONFIGURE_DEPENDS re-globs on build.
# A directory that holds two libraries (coord/: the client and the server) names them:
# DIR the directory under src/ (default NAME), FILES the only files of the library (no glob),
# EXCLUDE files the glob leaves out (the other library's).
function(wc_add_layer name)
  cmake_parse_arguments(ARG "" "DIR" "DEPS;FILES;EXCLUDE" ${ARGN})
  if(NOT ARG_DIR)
    set(ARG_DIR ${name})
  endif()
  set(src_dir ${PROJECT_SOURCE_DIR}/src/${ARG_DIR})
  if(ARG_FILES)
    set(sources)
    set(protos)
    foreach(file ${ARG_FILES})
      if(file MATCHES "\\.proto$")
        list(APPEND protos ${src_dir}/${file})
      else()
        list(APPEND sources ${src_dir}/${file})
      endif()
    endforeach()
  else()
    file(GLOB sources CONFIGURE_DEPENDS ${src_dir}/*.cc)
    file(GLOB protos CONFIGURE_DEPENDS ${src_dir}/*.proto)
    foreach(file ${ARG_EXCLUDE})
      list(REMOVE_ITEM sources ${src_dir}/${file})
      list(REMOVE_ITEM protos ${src_dir}/${file})
    endforeach()
  endif()
  if(NOT sources AND NOT protos)
    # A layer that is only headers so far.
    add_library(wc_${name} INTERFACE)
    target_include_directories(wc_${name} INTERFACE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(wc_${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(wc_${name} STATIC ${sources})
  if(protos)
    set(gen_dir ${PROJECT_BINARY_DIR}/gen)
    set(proto_sources)
    foreach(proto ${protos})
      get_filename_component(stem ${proto} NAME_WE)
      set(out_cc ${gen_dir}/${ARG_DIR}/${stem}.pb.cc)
      set(out_h ${gen_dir}/${ARG_DIR}/${stem}.pb.h)
      add_custom_command(
        OUTPUT ${out_cc} ${out_h}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${gen_dir}/${ARG_DIR}
        COMMAND protobuf::protoc --cpp_out=${gen_dir} -I${PROJECT_SOURCE_DIR}/src ${proto}
        DEPENDS ${proto} protobuf::protoc
        COMMENT "protoc ${ARG_DIR}/${stem}.proto")
      list(APPEND proto_sources ${out_cc})
    endforeach()
    # Generated code does not meet our warning flags; compile it without -Werror.
    set_source_files_properties(${proto_sources} PROPERTIES COMPILE_OPTIONS "-Wno-error;-w")
    target_sources(wc_${name} PRIVATE ${proto_sources})
    target_include_directories(wc_${name} SYSTEM PUBLIC ${gen_dir})
  endif()
  target_include_directories(wc_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(wc_${name} PUBLIC ${ARG_DEPS})
endfunction()

# wc_add_unit_tests(LAYER DEPS ...): one gtest binary per layer from tests/unit/LAYER/*_test.cc.
function(wc_add_unit_tests layer)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/unit/${layer}/*.cc)
  if(NOT sources)
    return()
  endif()
  add_executable(${layer}_test ${sources})
  target_include_directories(${layer}_test PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${layer}_test PRIVATE wc_${layer} ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  gtest_discover_tests(${layer}_test PROPERTIES LABELS unit DISCOVERY_TIMEOUT 60
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endfunction()

# wc_embed_asset(LAYER FILE NAME): compiles src/LAYER/FILE into wc_LAYER as
# `weightcast::assets::NAME` (a std::string_view), rebuilt whenever FILE changes.
function(wc_embed_asset layer file name)
  set(in ${PROJECT_SOURCE_DIR}/src/${layer}/${file})
  set(out ${PROJECT_BINARY_DIR}/gen/${layer}/${file}.cc)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DIN=${in} -DOUT=${out} -DNAME=${name}
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedAsset.cmake
    DEPENDS ${in} ${PROJECT_SOURCE_DIR}/cmake/EmbedAsset.cmake
    COMMENT "embed ${layer}/${file}")
  target_sources(wc_${layer} PRIVATE ${out})
endfunction()
