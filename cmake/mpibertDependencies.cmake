# The libraries mpibert's targets link, as imported targets: found once for the build
# (CMakeLists.txt) and again by the installed package's mpibertConfig.cmake for a project that
# links mpibert (MPIBERT_FINDING_PACKAGE set there: a missing one then makes find_package(mpibert)
# fail with its name instead of stopping CMake). LibTorch is not here: CMakeLists.txt and the config
# each find it their own way.

if(MPIBERT_FINDING_PACKAGE)
  include(CMakeFindDependencyMacro)
  macro(mpibert_find_dependency)
    find_dependency(${ARGN})
  endmacro()
else()
  macro(mpibert_find_dependency)
    find_package(${ARGN} REQUIRED)
  endmacro()
endif()
macro(mpibert_dependency_missing what)
  if(MPIBERT_FINDING_PACKAGE)
    set(mpibert_NOT_FOUND_MESSAGE "mpibert needs ${what}")
    set(mpibert_FOUND FALSE)
    return()
  endif()
  message(FATAL_ERROR "mpibert: ${what} not found")
endmacro()

# The C bindings only: mpibert calls no C++ MPI binding (OMPI_SKIP_MPICXX on the targets that
# include mpi.h keeps it so).
mpibert_find_dependency(MPI COMPONENTS C)
mpibert_find_dependency(HDF5 COMPONENTS C)
if(NOT TARGET hdf5::hdf5)  # CMake's FindHDF5 defines it from 3.19; before, its variables alone
  add_library(hdf5::hdf5 INTERFACE IMPORTED)
  set_target_properties(hdf5::hdf5 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${HDF5_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "${HDF5_C_LIBRARIES}" INTERFACE_COMPILE_DEFINITIONS "${HDF5_DEFINITIONS}")
endif()
mpibert_find_dependency(ZLIB)
mpibert_find_dependency(nlohmann_json 3)
mpibert_find_dependency(spdlog)
mpibert_find_dependency(fmt)
mpibert_find_dependency(Protobuf)

# CLI11 through its CMake config (Debian's libcli11-dev has one); a CLI11 without it, by its header.
find_package(CLI11 QUIET CONFIG)
if(NOT TARGET CLI11::CLI11)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp)
  if(NOT CLI11_INCLUDE_DIR)
    mpibert_dependency_missing("CLI11 (CLI/CLI.hpp; Debian's libcli11-dev)")
  endif()
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CLI11_INCLUDE_DIR}")
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
if(NOT UTF8PROC_INCLUDE_DIR OR NOT UTF8PROC_LIBRARY)
  mpibert_dependency_missing("utf8proc (utf8proc.h and libutf8proc; Debian's libutf8proc-dev)")
endif()
if(NOT TARGET mpibert::utf8proc)
  add_library(mpibert::utf8proc UNKNOWN IMPORTED)
  set_target_properties(mpibert::utf8proc PROPERTIES IMPORTED_LOCATION "${UTF8PROC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${UTF8PROC_INCLUDE_DIR}")
endif()

# LibTorch's include directory carries its own fmt (12.x) headers, which would shadow the system
# fmt that the system's spdlog was built against (9.x) in every file that includes both. A folder
# holding only a link to the system fmt, first on the include path, keeps the system's. (No
# LibTorch header that mpibert includes needs fmt 12; fmt's versioned namespaces keep the two apart
# at link time.) Sets `out` to that folder, made under `parent`.
function(mpibert_system_fmt_first parent out)
  get_target_property(fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  find_path(MPIBERT_SYSTEM_FMT_DIR fmt/format.h HINTS ${fmt_include} NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH)
  if(NOT MPIBERT_SYSTEM_FMT_DIR)
    message(FATAL_ERROR "mpibert: the system fmt's headers (fmt/format.h) not found beside ${fmt_include}")
  endif()
  file(MAKE_DIRECTORY "${parent}")
  file(CREATE_LINK "${MPIBERT_SYSTEM_FMT_DIR}/fmt" "${parent}/fmt" SYMBOLIC)
  set(${out} "${parent}" PARENT_SCOPE)
endfunction()
