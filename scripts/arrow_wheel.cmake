# Apache Arrow's C++ libraries (libarrow, libparquet) and headers from PyPI's pyarrow wheel, imported
# from its files (CMakeLists.txt includes this for the Parquet reader, src/data/squad_parquet.cpp).
# The wheel ships the headers (pyarrow/include) and the versioned libraries (libarrow.so.2500,
# libparquet.so.2500 for pyarrow 25) but no unversioned link names: the versioned files are linked
# by path, which records their sonames. scripts/install-deps.sh installs the pinned pyarrow into the
# same environment as PyTorch's wheel (MPIBERT_PYTHON), so that `cmake --install` copies both into
# the prefix (cmake/install_wheel_libraries.cmake) and the programs' RUNPATH finds them there.
#
# Defines the imported target mpibert::arrow_libraries (headers and both libraries); sets in the
# caller's scope MPIBERT_ARROW_VERSION, MPIBERT_ARROW_LIBRARY_DIR (the pyarrow package folder, which
# holds the libraries), MPIBERT_ARROW_SITE (the site-packages folder holding it) and
# MPIBERT_ARROW_LIBRARIES (the two files).

function(mpibert_import_arrow_wheel python)
  # Where the package is, without importing it.
  execute_process(
    COMMAND "${python}" -c "import importlib.util; print(importlib.util.find_spec('pyarrow').submodule_search_locations[0])"
    OUTPUT_VARIABLE arrow_root OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE found ERROR_QUIET)
  if(NOT found EQUAL 0 OR NOT EXISTS "${arrow_root}/include/parquet/arrow/reader.h")
    message(FATAL_ERROR "mpibert: ${python} has no pyarrow package with its C++ headers, which the Parquet reader "
                        "needs: run scripts/install-deps.sh (PyPI's pyarrow wheel into the environment)")
  endif()
  file(STRINGS "${arrow_root}/include/arrow/util/config.h" version_line REGEX "^#define ARROW_VERSION_STRING")
  string(REGEX REPLACE ".*\"(.*)\".*" "\\1" version "${version_line}")
  set(libraries "")
  foreach(name arrow parquet)
    # libarrow.so.2600, not libarrow_acero.so.2600 nor libarrow_python.so.
    file(GLOB candidates "${arrow_root}/lib${name}.so.[0-9]*")
    list(FILTER candidates INCLUDE REGEX "/lib${name}\\.so\\.[0-9]+$")
    list(LENGTH candidates count)
    if(NOT count EQUAL 1)
      message(FATAL_ERROR "mpibert: expected one lib${name}.so.N in ${arrow_root}, found ${count}: the pyarrow wheel in "
                          "${python} is incomplete (scripts/install-deps.sh reinstalls it)")
    endif()
    add_library(mpibert_wheel_${name} SHARED IMPORTED)
    set_target_properties(mpibert_wheel_${name} PROPERTIES IMPORTED_LOCATION "${candidates}")
    list(APPEND libraries "${candidates}")
  endforeach()
  add_library(mpibert::arrow_libraries INTERFACE IMPORTED)
  target_include_directories(mpibert::arrow_libraries SYSTEM INTERFACE "${arrow_root}/include")
  target_link_libraries(mpibert::arrow_libraries INTERFACE mpibert_wheel_parquet mpibert_wheel_arrow)
  message(STATUS "mpibert: Apache Arrow ${version} (libarrow, libparquet) from the pyarrow wheel in ${arrow_root}")
  get_filename_component(site "${arrow_root}" DIRECTORY)
  set(MPIBERT_ARROW_VERSION "${version}" PARENT_SCOPE)
  set(MPIBERT_ARROW_LIBRARY_DIR "${arrow_root}" PARENT_SCOPE)
  set(MPIBERT_ARROW_SITE "${site}" PARENT_SCOPE)
  set(MPIBERT_ARROW_LIBRARIES "${libraries}" PARENT_SCOPE)
endfunction()
