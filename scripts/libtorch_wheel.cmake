# LibTorch from PyTorch's wheel, imported from its files (CMakeLists.txt includes this when no
# other LibTorch is named). The wheel's own CMake config (TorchConfig.cmake) cannot be used without
# a CUDA toolkit: for a CUDA wheel it enables the CUDA language, which needs nvcc, even to link a
# CPU program. Everything a C++ program needs is in the wheel and the NVIDIA wheels it depends on:
# torch/include, torch/lib (libtorch, libtorch_cpu, libc10, and libtorch_cuda, libc10_cuda for
# CUDA), and nvidia/cu13 (or nvidia/cuda_runtime for CUDA 12) with cuda_runtime_api.h and
# libcudart.so.N, plus the headers of nvidia-cuda-crt and nvidia-cuda-cccl, which
# scripts/install-deps.sh adds.
#
# Defines the imported targets mpibert::torch_libraries (headers, libraries) and, for a CUDA wheel,
# mpibert::cudart; sets in the caller's scope MPIBERT_TORCH_CUDA, TORCH_INSTALL_PREFIX (the torch
# package folder), MPIBERT_WHEEL_SITE (the site-packages folder holding it),
# MPIBERT_TORCH_LIBRARY_NAMES (torch, torch_cpu, c10, ...) and MPIBERT_WHEEL_LIBRARY_DIRS (the
# wheels' library folders, which CMakeLists.txt puts first on the programs' RUNPATH). An installed
# mpibert does not use it: `cmake --install` copies what the programs load into its prefix, and the
# package's config imports LibTorch from there.
#
# Compile definitions: the wheel's config also defines USE_DISTRIBUTED, USE_C10D_* and USE_RPC for
# its consumers; they gate only the c10d/RPC headers, which mpibert does not include.

function(mpibert_import_libtorch_wheel python)
  if(NOT EXISTS "${python}")
    message(FATAL_ERROR "mpibert: no LibTorch: ${python} does not exist. Run scripts/install-deps.sh "
                        "(PyTorch's wheel into .venv), or name a LibTorch with -DTorch_DIR=.../share/cmake/Torch")
  endif()
  # Where the package is, without importing it (an import loads every CUDA library).
  execute_process(
    COMMAND "${python}" -c "import importlib.util; print(importlib.util.find_spec('torch').submodule_search_locations[0])"
    OUTPUT_VARIABLE torch_root OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE found ERROR_VARIABLE why)
  if(NOT found EQUAL 0 OR NOT EXISTS "${torch_root}/version.py")
    message(FATAL_ERROR "mpibert: ${python} has no torch package (${why}). Run scripts/install-deps.sh.")
  endif()
  file(STRINGS "${torch_root}/version.py" version_line REGEX "^__version__")
  file(STRINGS "${torch_root}/version.py" cuda_line REGEX "^cuda")
  string(REGEX REPLACE ".*'(.*)'.*" "\\1" torch_version "${version_line}")
  set(cuda_version "")
  if(cuda_line MATCHES "'([0-9.]+)'")
    set(cuda_version "${CMAKE_MATCH_1}")
  endif()

  set(libraries torch torch_cpu c10)
  if(cuda_version)
    list(APPEND libraries torch_cuda c10_cuda)
  endif()
  add_library(mpibert::torch_libraries INTERFACE IMPORTED)
  target_include_directories(mpibert::torch_libraries SYSTEM INTERFACE
    "${torch_root}/include" "${torch_root}/include/torch/csrc/api/include")
  foreach(name IN LISTS libraries)
    # Imported targets, so that the link puts their folder on the programs' RPATH.
    set(file "${torch_root}/lib/lib${name}.so")
    if(NOT EXISTS "${file}")
      message(FATAL_ERROR "mpibert: ${file} is missing: the torch wheel in ${python} is incomplete")
    endif()
    add_library(mpibert_wheel_${name} SHARED IMPORTED)
    set_target_properties(mpibert_wheel_${name} PROPERTIES IMPORTED_LOCATION "${file}")
    target_link_libraries(mpibert::torch_libraries INTERFACE mpibert_wheel_${name})
  endforeach()
  # libtorch_cpu and libtorch_cuda register their kernels when loaded: nothing of ours calls them
  # by name, so a linker that drops unreferenced libraries (--as-needed, Ubuntu's default) must not.
  target_link_options(mpibert::torch_libraries INTERFACE "LINKER:--no-as-needed")

  if(cuda_version)
    string(REGEX MATCH "^[0-9]+" cuda_major "${cuda_version}")
    get_filename_component(site_packages "${torch_root}" DIRECTORY)
    set(runtime_dirs "${site_packages}/nvidia/cu${cuda_major}" "${site_packages}/nvidia/cuda_runtime")
    find_path(MPIBERT_CUDART_INCLUDE_DIR cuda_runtime_api.h PATHS ${runtime_dirs} PATH_SUFFIXES include NO_DEFAULT_PATH)
    find_library(MPIBERT_CUDART_LIBRARY NAMES libcudart.so.${cuda_major} PATHS ${runtime_dirs} PATH_SUFFIXES lib NO_DEFAULT_PATH)
    if(NOT MPIBERT_CUDART_INCLUDE_DIR OR NOT MPIBERT_CUDART_LIBRARY)
      message(FATAL_ERROR "mpibert: torch ${torch_version} has CUDA ${cuda_version}, but the CUDA runtime wheel "
                          "(cuda_runtime_api.h, libcudart.so.${cuda_major}) is not in ${runtime_dirs}")
    endif()
    # cuda_runtime.h includes crt/host_config.h, cuda_fp16.h nv/target: they come in nvidia-cuda-crt
    # and nvidia-cuda-cccl (scripts/install-deps.sh installs them).
    foreach(header crt/host_config.h nv/target)
      if(NOT EXISTS "${MPIBERT_CUDART_INCLUDE_DIR}/${header}")
        message(FATAL_ERROR "mpibert: ${MPIBERT_CUDART_INCLUDE_DIR}/${header} is missing: install the wheels "
                            "nvidia-cuda-crt==${cuda_version}.* and nvidia-cuda-cccl==${cuda_version}.* (scripts/install-deps.sh does)")
      endif()
    endforeach()
    add_library(mpibert_wheel_cudart SHARED IMPORTED)
    set_target_properties(mpibert_wheel_cudart PROPERTIES IMPORTED_LOCATION "${MPIBERT_CUDART_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${MPIBERT_CUDART_INCLUDE_DIR}")
    add_library(mpibert::cudart INTERFACE IMPORTED)
    target_link_libraries(mpibert::cudart INTERFACE mpibert_wheel_cudart)
    # LibTorch's CUDA headers (c10/cuda, ATen/cuda) include the runtime's.
    target_include_directories(mpibert::torch_libraries SYSTEM INTERFACE "${MPIBERT_CUDART_INCLUDE_DIR}")
    set(MPIBERT_TORCH_CUDA ON PARENT_SCOPE)
    get_filename_component(cudart_dir "${MPIBERT_CUDART_LIBRARY}" DIRECTORY)
    set(MPIBERT_WHEEL_LIBRARY_DIRS "${torch_root}/lib;${cudart_dir};${site_packages}/nvidia/nccl/lib" PARENT_SCOPE)
    message(STATUS "mpibert: LibTorch ${torch_version} from the wheel in ${torch_root}, CUDA ${cuda_version} runtime from ${MPIBERT_CUDART_LIBRARY} (no CUDA toolkit needed)")
  else()
    set(MPIBERT_WHEEL_LIBRARY_DIRS "${torch_root}/lib" PARENT_SCOPE)
    message(STATUS "mpibert: LibTorch ${torch_version} from the wheel in ${torch_root}, without CUDA")
  endif()
  set(TORCH_INSTALL_PREFIX "${torch_root}" PARENT_SCOPE)
  set(MPIBERT_TORCH_VERSION "${torch_version}" PARENT_SCOPE)
  get_filename_component(site_packages "${torch_root}" DIRECTORY)
  set(MPIBERT_WHEEL_SITE "${site_packages}" PARENT_SCOPE)
  set(MPIBERT_TORCH_LIBRARY_NAMES "${libraries}" PARENT_SCOPE)
endfunction()
