# The libraries mpibert's targets link, as imported targets: found once for the build
# (CMakeLists.txt) and again by the installed package's mpibertConfig.cmake for a project that
# links mpibert (MPIBERT_FINDING_PACKAGE set there: a missing one then makes find_package(mpibert)
# fail with its name instead of stopping CMake). LibTorch is not here: CMakeLists.txt and the config
# each find it their own way.
#
# In the build, spdlog, fmt, CLI11, nlohmann-json and utf8proc are taken from the system where
# find_package (or, for utf8proc, pkg-config and the usual folders) finds them, and otherwise built
# from their pinned release archives (cmake/pinned_dependencies.cmake; -DMPIBERT_FETCH_DEPENDENCIES=OFF
# refuses instead): a cluster without root builds with its modules for the compiler, CMake, MPI and
# HDF5 alone. Those built are installed with mpibert (their headers, static libraries, CMake
# packages and licenses), so that the installed package finds them in its own prefix.
# MPI and HDF5 are exported as mpibert::mpi and mpibert::hdf5: the config recreates them from what
# the build linked (the MPI and HDF5 the programs load), without searching again.

macro(mpibert_dependency_missing what)
  if(MPIBERT_FINDING_PACKAGE)
    set(mpibert_NOT_FOUND_MESSAGE "mpibert needs ${what}")
    set(mpibert_FOUND FALSE)
    return()
  endif()
  message(FATAL_ERROR "mpibert: ${what} not found")
endmacro()

# LibTorch's include directory carries its own fmt (12.x) headers, which would shadow the system
# fmt that the system's spdlog was built against (9.x) in every file that includes both. A folder
# holding only a link to the system fmt, first on the include path, keeps the system's. (No
# LibTorch header that mpibert includes needs fmt 12; fmt's versioned namespaces keep the two apart
# at link time.) Sets `out` to that folder, made under `parent`; no cache entry (the installed
# config calls it in the consuming project).
function(mpibert_system_fmt_first parent out)
  if(MPIBERT_BUILT_fmt)
    set(candidates "${fmt_SOURCE_DIR}/include")
  else()
    get_target_property(candidates fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  endif()
  foreach(prefix IN LISTS CMAKE_SYSTEM_PREFIX_PATH)
    list(APPEND candidates "${prefix}/include")
  endforeach()
  set(fmt_dir "")
  foreach(dir IN LISTS candidates)
    if(dir AND EXISTS "${dir}/fmt/format.h")
      set(fmt_dir "${dir}")
      break()
    endif()
  endforeach()
  if(NOT fmt_dir)
    mpibert_dependency_missing("the headers of fmt::fmt (fmt/format.h, looked for in ${candidates})")
  endif()
  file(MAKE_DIRECTORY "${parent}")
  file(CREATE_LINK "${fmt_dir}/fmt" "${parent}/fmt" SYMBOLIC)
  set(${out} "${parent}" PARENT_SCOPE)
endfunction()

if(MPIBERT_FINDING_PACKAGE)
  # --- the installed package -------------------------------------------------------------------
  include(CMakeFindDependencyMacro)
  # MPI and HDF5 as the build linked them (their files must still be there: the programs load them).
  foreach(library IN LISTS _mpibert_mpi_libraries _mpibert_hdf5_libraries)
    if(IS_ABSOLUTE "${library}" AND NOT EXISTS "${library}")
      mpibert_dependency_missing("${library}, which it was built against (load the modules it was built with)")
    endif()
  endforeach()
  if("Threads::Threads" IN_LIST _mpibert_mpi_libraries)
    find_dependency(Threads)
  endif()
  if(NOT TARGET mpibert::mpi)
    add_library(mpibert::mpi INTERFACE IMPORTED)
    set_target_properties(mpibert::mpi PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_mpibert_mpi_include_dirs}"
      INTERFACE_LINK_LIBRARIES "${_mpibert_mpi_libraries}" INTERFACE_COMPILE_OPTIONS "${_mpibert_mpi_compile_options}"
      INTERFACE_COMPILE_DEFINITIONS "${_mpibert_mpi_compile_definitions}" INTERFACE_LINK_OPTIONS "${_mpibert_mpi_link_options}")
  endif()
  if(NOT TARGET mpibert::hdf5)
    add_library(mpibert::hdf5 INTERFACE IMPORTED)
    set_target_properties(mpibert::hdf5 PROPERTIES INTERFACE_LINK_LIBRARIES "${_mpibert_hdf5_libraries}")
  endif()
  find_dependency(ZLIB)
  find_dependency(CURL)
  find_dependency(Threads)
  find_dependency(Protobuf)
  # The packages of those the build built from their pinned release are in this prefix; the others
  # are searched for as usual, this prefix first. fmt before spdlog, whose config looks for it.
  foreach(package nlohmann_json fmt spdlog CLI11)
    if(package IN_LIST _mpibert_built)
      if(package STREQUAL "CLI11")
        continue()  # exported with mpibert's targets (mpibert::cli11)
      endif()
      find_dependency(${package} CONFIG PATHS "${_mpibert_prefix}" NO_DEFAULT_PATH)
    elseif(package STREQUAL "CLI11")
      find_package(CLI11 QUIET CONFIG HINTS "${_mpibert_prefix}")
      if(NOT TARGET CLI11::CLI11)
        find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp HINTS "${_mpibert_prefix}/include")
        if(NOT CLI11_INCLUDE_DIR)
          mpibert_dependency_missing("CLI11 (CLI/CLI.hpp)")
        endif()
        add_library(CLI11::CLI11 INTERFACE IMPORTED)
        set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CLI11_INCLUDE_DIR}")
      endif()
    else()
      find_dependency(${package} CONFIG HINTS "${_mpibert_prefix}")
    endif()
  endforeach()
  if(NOT "pcre2" IN_LIST _mpibert_built AND NOT TARGET mpibert::pcre2)
    find_library(PCRE2_LIBRARY pcre2-32 HINTS "${_mpibert_prefix}/${_mpibert_libdir}")
    if(NOT PCRE2_LIBRARY)
      mpibert_dependency_missing("PCRE2's 32-bit library (libpcre2-32)")
    endif()
    add_library(mpibert::pcre2 UNKNOWN IMPORTED)
    set_target_properties(mpibert::pcre2 PROPERTIES IMPORTED_LOCATION "${PCRE2_LIBRARY}")
  endif()
  if(NOT "utf8proc" IN_LIST _mpibert_built AND NOT TARGET mpibert::utf8proc)
    find_library(UTF8PROC_LIBRARY utf8proc HINTS "${_mpibert_prefix}/${_mpibert_libdir}")
    if(NOT UTF8PROC_LIBRARY)
      mpibert_dependency_missing("utf8proc (libutf8proc)")
    endif()
    add_library(mpibert::utf8proc UNKNOWN IMPORTED)
    set_target_properties(mpibert::utf8proc PROPERTIES IMPORTED_LOCATION "${UTF8PROC_LIBRARY}")
  endif()
  return()
endif()

# --- the build -----------------------------------------------------------------------------------
# Every dependency missing is named, with where CMake looked, before the configure stops. With
# MPIBERT_PROBE (cmake/probe, scripts/install-deps.sh without root) nothing is built or
# downloaded: what is found, what is missing and what would be built is written to
# MPIBERT_PROBE_REPORT, and the configure does not stop.
include("${CMAKE_CURRENT_LIST_DIR}/pinned_dependencies.cmake")
option(MPIBERT_FETCH_DEPENDENCIES
  "Build spdlog, fmt, CLI11, nlohmann-json and utf8proc from their pinned releases where they are not found" ON)
if(NOT DEFINED MPIBERT_DEPENDENCY_ARCHIVES)
  set(MPIBERT_DEPENDENCY_ARCHIVES "$ENV{MPIBERT_DEPENDENCY_ARCHIVES}")
  if(NOT MPIBERT_DEPENDENCY_ARCHIVES)
    get_filename_component(MPIBERT_DEPENDENCY_ARCHIVES "${CMAKE_CURRENT_LIST_DIR}/../.deps" ABSOLUTE)
  endif()
endif()
set(MPIBERT_DEPENDENCY_ARCHIVES "${MPIBERT_DEPENDENCY_ARCHIVES}" CACHE PATH
  "A folder holding the pinned release archives (cmake/pinned_dependencies.cmake), looked in before the network")
set(MPIBERT_BUILT_DEPENDENCIES "")  # those built from their pinned release, in this order
set(MPIBERT_BUILT_TARGETS "")       # and their targets exported with mpibert's
set(MPIBERT_MISSING "")             # what is missing, each with where it was looked for
set(MPIBERT_PROBE_LINES "")         # MPIBERT_PROBE's report

# Where find_package looks for a package's CMake config beyond its own hints.
set(MPIBERT_LOOKED "CMAKE_PREFIX_PATH=$ENV{CMAKE_PREFIX_PATH}${CMAKE_PREFIX_PATH}, PATH's prefixes, ${CMAKE_SYSTEM_PREFIX_PATH}")
string(REPLACE ";" " " MPIBERT_LOOKED "${MPIBERT_LOOKED}")

macro(mpibert_report line)
  list(APPEND MPIBERT_PROBE_LINES "${line}")
endmacro()

# find_package(PACKAGE ARGN...); when not found, WHAT (what it is, where it was looked for) is missing.
macro(mpibert_require package what)
  find_package(${package} QUIET ${ARGN})
  if(NOT ${package}_FOUND)
    list(APPEND MPIBERT_MISSING "${what}")
  endif()
endmacro()

# Builds NAME from its pinned release archive (FetchContent: the archive checked against its
# SHA-256), as a static library where it has one, and installs it with mpibert.
function(mpibert_build_pinned name why)
  set(version ${MPIBERT_PINNED_${name}_VERSION})
  if(NOT MPIBERT_FETCH_DEPENDENCIES)
    set(MPIBERT_MISSING ${MPIBERT_MISSING} "${why} (MPIBERT_FETCH_DEPENDENCIES is OFF)" PARENT_SCOPE)
    return()
  endif()
  mpibert_pinned_urls(${name} urls)
  if(MPIBERT_PROBE)
    string(REPLACE ";" " or " where "${urls}")
    if(urls MATCHES "^/")
      set(where "from ${where}")
    else()
      set(where "downloaded from ${where}")
    endif()
    set(MPIBERT_PROBE_LINES ${MPIBERT_PROBE_LINES} "build: ${name} ${version}: ${why}: the build builds the pinned release, ${where}" PARENT_SCOPE)
    set(MPIBERT_BUILT_DEPENDENCIES ${MPIBERT_BUILT_DEPENDENCIES} ${name} PARENT_SCOPE)
    return()
  endif()
  include(FetchContent)
  string(TOLOWER "${name}" lower)
  # Their options take the values set here, and nothing of mpibert's build style applies to them.
  set(CMAKE_POLICY_DEFAULT_CMP0077 NEW)
  set(CMAKE_UNITY_BUILD OFF)
  set(BUILD_SHARED_LIBS OFF)
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)  # a project may link mpibert into a shared library
  set(subdir "")
  if(name STREQUAL "fmt")
    set(FMT_INSTALL ON)
    set(FMT_SYSTEM_HEADERS ON)
  elseif(name STREQUAL "spdlog")
    set(SPDLOG_FMT_EXTERNAL ON)
    set(SPDLOG_INSTALL ON)
    set(SPDLOG_BUILD_EXAMPLE OFF)
  elseif(name STREQUAL "nlohmann_json")
    set(JSON_Install ON)
    set(JSON_BuildTests OFF)
    set(JSON_SystemInclude ON)
  else()
    # CLI11 installs nothing when it is not the top project, and utf8proc installs to the prefix
    # of the configure, not of `cmake --install --prefix`: mpibert makes their targets.
    set(subdir "mpibert-makes-its-target")
  endif()
  set(timestamp "")
  if(NOT CMAKE_VERSION VERSION_LESS 3.24)
    set(timestamp DOWNLOAD_EXTRACT_TIMESTAMP TRUE)
  endif()
  message(STATUS "mpibert: ${why}: building ${name} ${version} from its pinned release "
                 "${MPIBERT_PINNED_${name}_FILE} (SHA-256 ${MPIBERT_PINNED_${name}_SHA256}) from ${urls}")
  FetchContent_Declare(${lower} URL ${urls} URL_HASH SHA256=${MPIBERT_PINNED_${name}_SHA256} ${timestamp}
    SOURCE_SUBDIR "${subdir}")
  FetchContent_MakeAvailable(${lower})
  set(source "${${lower}_SOURCE_DIR}")
  if(name STREQUAL "CLI11")
    add_library(mpibert_cli11 INTERFACE)
    target_include_directories(mpibert_cli11 SYSTEM INTERFACE $<BUILD_INTERFACE:${source}/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    set_target_properties(mpibert_cli11 PROPERTIES EXPORT_NAME cli11)
    add_library(CLI11::CLI11 ALIAS mpibert_cli11)
    install(DIRECTORY "${source}/include/CLI" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
    set(MPIBERT_BUILT_TARGETS ${MPIBERT_BUILT_TARGETS} mpibert_cli11 PARENT_SCOPE)
  elseif(name STREQUAL "utf8proc")
    # One C file (it includes the Unicode tables of utf8proc_data.c); only mpibert's own sources
    # include its header.
    add_library(mpibert_utf8proc STATIC "${source}/utf8proc.c")
    target_compile_definitions(mpibert_utf8proc PUBLIC UTF8PROC_STATIC)
    target_include_directories(mpibert_utf8proc SYSTEM PUBLIC $<BUILD_INTERFACE:${source}>)
    set_target_properties(mpibert_utf8proc PROPERTIES EXPORT_NAME utf8proc C_STANDARD 99)
    add_library(mpibert::utf8proc ALIAS mpibert_utf8proc)
    set(MPIBERT_BUILT_TARGETS ${MPIBERT_BUILT_TARGETS} mpibert_utf8proc PARENT_SCOPE)
    set(UTF8PROC_INCLUDE_DIR "${source}" PARENT_SCOPE)
    set(UTF8PROC_LIBRARY mpibert_utf8proc PARENT_SCOPE)
  elseif(name STREQUAL "pcre2")
    mpibert_make_pcre2_target("${source}")
    set(MPIBERT_BUILT_TARGETS ${MPIBERT_BUILT_TARGETS} mpibert_pcre2 PARENT_SCOPE)
  endif()
  file(GLOB licenses LIST_DIRECTORIES false "${source}/LICENSE*" "${source}/LICENCE*")
  install(FILES ${licenses} DESTINATION ${CMAKE_INSTALL_DOCDIR}/third-party/${name})
  set(${lower}_SOURCE_DIR "${source}" PARENT_SCOPE)
  set(MPIBERT_BUILT_${name} ON PARENT_SCOPE)
  set(MPIBERT_BUILT_DEPENDENCIES ${MPIBERT_BUILT_DEPENDENCIES} ${name} PARENT_SCOPE)
endfunction()

# The C bindings only: mpibert calls no C++ MPI binding (OMPI_SKIP_MPICXX on the targets that
# include mpi.h keeps it so). The library's own version string names it in the modulefile.
set(MPI_DETERMINE_LIBRARY_VERSION ON)
mpibert_require(MPI "MPI's C bindings (FindMPI: mpicc on PATH gave '\${MPI_C_COMPILER}', or MPI_HOME=$ENV{MPI_HOME}): load the site's MPI module, or Debian's libopenmpi-dev" COMPONENTS C)
mpibert_require(HDF5 "HDF5's C library (FindHDF5: h5cc on PATH, or HDF5_ROOT=$ENV{HDF5_ROOT}): load the site's HDF5 module, or Debian's libhdf5-dev" COMPONENTS C)
if(HDF5_FOUND AND NOT TARGET hdf5::hdf5)  # CMake's FindHDF5 defines it from 3.19; before, its variables alone
  add_library(hdf5::hdf5 INTERFACE IMPORTED)
  set_target_properties(hdf5::hdf5 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${HDF5_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "${HDF5_C_LIBRARIES}" INTERFACE_COMPILE_DEFINITIONS "${HDF5_DEFINITIONS}")
endif()
if(MPI_FOUND)
  add_library(mpibert::mpi INTERFACE IMPORTED)
  target_link_libraries(mpibert::mpi INTERFACE MPI::MPI_C)
  string(REGEX REPLACE "[\r\n].*" "" version "${MPI_C_LIBRARY_VERSION_STRING}")
  string(REPLACE ";" " " libraries "${MPI_C_LIBRARIES}")
  mpibert_report("found: MPI: ${version} (${libraries}, mpiexec ${MPIEXEC_EXECUTABLE})")
endif()
if(HDF5_FOUND)
  add_library(mpibert::hdf5 INTERFACE IMPORTED)
  target_link_libraries(mpibert::hdf5 INTERFACE hdf5::hdf5)
  list(GET HDF5_C_LIBRARIES 0 library)
  mpibert_report("found: HDF5 ${HDF5_VERSION} (${library})")
endif()
mpibert_require(ZLIB "zlib (FindZLIB: zlib.h and libz under ${MPIBERT_LOOKED}, or ZLIB_ROOT)")
if(ZLIB_FOUND)
  mpibert_report("found: zlib ${ZLIB_VERSION_STRING} (${ZLIB_LIBRARIES})")
endif()
# libcurl: MLflow's REST API (src/report/http_client.cpp). Clusters have it (curl is everywhere),
# its headers in a libcurl-devel package or a module; Debian's libcurl4-openssl-dev.
mpibert_require(CURL "libcurl (FindCURL: curl/curl.h and libcurl under ${MPIBERT_LOOKED}, or CURL_ROOT): Debian's libcurl4-openssl-dev, or a site's module")
if(CURL_FOUND)
  mpibert_report("found: libcurl ${CURL_VERSION_STRING} (${CURL_LIBRARIES})")
endif()
find_package(Threads REQUIRED)
mpibert_require(Protobuf "protobuf's libprotobuf and protoc (FindProtobuf: under ${MPIBERT_LOOKED}, protoc on PATH): Debian's libprotobuf-dev and protobuf-compiler, or a site's module")
if(Protobuf_FOUND)
  mpibert_report("found: protobuf ${Protobuf_VERSION} (${Protobuf_LIBRARIES}, protoc ${Protobuf_PROTOC_EXECUTABLE})")
endif()

find_package(nlohmann_json 3 QUIET)
if(nlohmann_json_FOUND)
  mpibert_report("found: nlohmann_json ${nlohmann_json_VERSION} (${nlohmann_json_DIR})")
else()
  mpibert_build_pinned(nlohmann_json "nlohmann-json 3 not found (nlohmann_jsonConfig.cmake under ${MPIBERT_LOOKED})")
endif()

# spdlog as the system has it, with the fmt it was built against (its config finds that); else the
# pinned spdlog, over the system fmt where that is one spdlog 1.10 builds with (8 or 9), else over
# the pinned fmt.
find_package(spdlog QUIET CONFIG)
if(spdlog_FOUND)
  mpibert_require(fmt "fmt, which spdlog ${spdlog_VERSION} (${spdlog_DIR}) was built with" CONFIG)
  mpibert_report("found: spdlog ${spdlog_VERSION} (${spdlog_DIR}), fmt ${fmt_VERSION} (${fmt_DIR})")
else()
  find_package(fmt QUIET CONFIG)
  if(NOT fmt_FOUND)
    mpibert_build_pinned(fmt "fmt not found (fmt-config.cmake under ${MPIBERT_LOOKED})")
  elseif(fmt_VERSION VERSION_LESS 8 OR NOT fmt_VERSION VERSION_LESS 10)
    mpibert_build_pinned(fmt "fmt ${fmt_VERSION} (${fmt_DIR}) is not one the pinned spdlog builds with (8 or 9)")
  else()
    mpibert_report("found: fmt ${fmt_VERSION} (${fmt_DIR})")
  endif()
  mpibert_build_pinned(spdlog "spdlog not found (spdlogConfig.cmake under ${MPIBERT_LOOKED})")
endif()

# CLI11 through its CMake config (Debian's libcli11-dev has one); a CLI11 without it, by its header.
find_package(CLI11 QUIET CONFIG)
if(TARGET CLI11::CLI11)
  mpibert_report("found: CLI11 ${CLI11_VERSION} (${CLI11_DIR})")
else()
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp)
  if(CLI11_INCLUDE_DIR)
    add_library(CLI11::CLI11 INTERFACE IMPORTED)
    set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CLI11_INCLUDE_DIR}")
    mpibert_report("found: CLI11 (${CLI11_INCLUDE_DIR}/CLI/CLI.hpp)")
  else()
    mpibert_build_pinned(CLI11 "CLI11 not found (CLI11Config.cmake, CLI/CLI.hpp under ${MPIBERT_LOOKED})")
  endif()
endif()

# utf8proc: pkg-config's answer as a hint only, its files found by CMake. A prefix on
# CMAKE_PREFIX_PATH comes first (scripts/gpu_check.sh builds against Debian packages unpacked under
# one, whose libutf8proc.pc still says /usr).
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(MPIBERT_PC_UTF8PROC QUIET libutf8proc)
endif()
find_path(UTF8PROC_INCLUDE_DIR utf8proc.h HINTS ${MPIBERT_PC_UTF8PROC_INCLUDEDIR})
find_library(UTF8PROC_LIBRARY utf8proc HINTS ${MPIBERT_PC_UTF8PROC_LIBDIR})
if(UTF8PROC_INCLUDE_DIR AND UTF8PROC_LIBRARY)
  add_library(mpibert::utf8proc UNKNOWN IMPORTED)
  set_target_properties(mpibert::utf8proc PROPERTIES IMPORTED_LOCATION "${UTF8PROC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${UTF8PROC_INCLUDE_DIR}")
  mpibert_report("found: utf8proc (${UTF8PROC_LIBRARY})")
else()
  mpibert_build_pinned(utf8proc "utf8proc not found (pkg-config's libutf8proc, then utf8proc.h and libutf8proc under ${MPIBERT_LOOKED})")
endif()

# PCRE2's 32-bit library from its release's sources, as its own CMakeLists.txt configures it
# with Unicode support and without JIT (its generic config.h and pcre2.h; only mpibert's sources
# include the header).
function(mpibert_make_pcre2_target source)
  set(generated "${CMAKE_BINARY_DIR}/_deps/pcre2-generated")  # beside the release, as the other pinned builds
  configure_file("${source}/src/config.h.generic" "${generated}/config.h" COPYONLY)
  configure_file("${source}/src/pcre2.h.generic" "${generated}/pcre2.h" COPYONLY)
  configure_file("${source}/src/pcre2_chartables.c.dist" "${generated}/pcre2_chartables.c" COPYONLY)
  set(sources "${generated}/pcre2_chartables.c")
  foreach(part auto_possess compile config context convert dfa_match error extuni find_bracket jit_compile maketables match
               match_data newline ord2utf pattern_info script_run serialize string_utils study substitute substring tables ucd
               valid_utf xclass)
    list(APPEND sources "${source}/src/pcre2_${part}.c")
  endforeach()
  add_library(mpibert_pcre2 STATIC ${sources})
  target_compile_definitions(mpibert_pcre2 PRIVATE HAVE_CONFIG_H SUPPORT_UNICODE PUBLIC PCRE2_CODE_UNIT_WIDTH=32 PCRE2_STATIC)
  target_include_directories(mpibert_pcre2 PRIVATE "${source}/src" SYSTEM PUBLIC $<BUILD_INTERFACE:${generated}>)
  set_target_properties(mpibert_pcre2 PROPERTIES EXPORT_NAME pcre2 C_STANDARD 99)
  add_library(mpibert::pcre2 ALIAS mpibert_pcre2)
endfunction()

# PCRE2's 32-bit library (tokenizer.json's regular expressions): as utf8proc, pkg-config's answer
# as a hint and its files found by CMake; else built from its pinned release.
function(mpibert_find_library target pc_module header library why)
  string(TOUPPER "${target}" upper)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(MPIBERT_PC_${upper} QUIET ${pc_module})
  endif()
  find_path(${upper}_INCLUDE_DIR ${header} HINTS ${MPIBERT_PC_${upper}_INCLUDEDIR})
  find_library(${upper}_LIBRARY ${library} HINTS ${MPIBERT_PC_${upper}_LIBDIR})
  if(${upper}_INCLUDE_DIR AND ${upper}_LIBRARY)
    add_library(mpibert::${target} UNKNOWN IMPORTED GLOBAL)
    set_target_properties(mpibert::${target} PROPERTIES IMPORTED_LOCATION "${${upper}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${upper}_INCLUDE_DIR}")
    set(MPIBERT_PROBE_LINES ${MPIBERT_PROBE_LINES} "found: ${target} (${${upper}_LIBRARY})" PARENT_SCOPE)
  else()
    mpibert_build_pinned(${target} "${why} not found (pkg-config's ${pc_module}, then ${header} and lib${library} under ${MPIBERT_LOOKED})")
    foreach(variable MPIBERT_MISSING MPIBERT_PROBE_LINES MPIBERT_BUILT_DEPENDENCIES MPIBERT_BUILT_TARGETS MPIBERT_BUILT_${target})
      set(${variable} ${${variable}} PARENT_SCOPE)
    endforeach()
  endif()
endfunction()
mpibert_find_library(pcre2 libpcre2-32 pcre2.h pcre2-32 "PCRE2's 32-bit library (Debian's libpcre2-dev)")

if(MPIBERT_PROBE)
  foreach(missing IN LISTS MPIBERT_MISSING)
    list(APPEND MPIBERT_PROBE_LINES "missing: ${missing}")
  endforeach()
  string(REPLACE ";" "\n" MPIBERT_PROBE_LINES "${MPIBERT_PROBE_LINES}")
  file(WRITE "${MPIBERT_PROBE_REPORT}" "${MPIBERT_PROBE_LINES}\n")
elseif(MPIBERT_MISSING)
  string(REPLACE ";" "\n  " MPIBERT_MISSING "${MPIBERT_MISSING}")
  message(FATAL_ERROR "mpibert: missing (scripts/install-deps.sh checks them all):\n  ${MPIBERT_MISSING}")
endif()
