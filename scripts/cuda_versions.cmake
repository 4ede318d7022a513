# The CUDA version a LibTorch was built for, and the rule that the CUDA toolkit a configure finds
# beside it has the same major version: a program with two CUDA runtimes of different majors (the
# toolkit's, linked by us, and LibTorch's own) loads both and fails in ways that name neither.
# CMakeLists.txt applies it to a LibTorch named with -DTorch_DIR; tests/test_cuda_versions.cmake
# checks it with `cmake -P`.

# "13.0" from PREFIX/build-version ("2.11.0+cu130", LibTorch's archive) or PREFIX/version.py
# (cuda = '13.0', PyTorch's wheel); "" for a LibTorch without CUDA or one that says nothing.
function(mpibert_libtorch_cuda_version prefix out_var)
  set(version "")
  if(EXISTS "${prefix}/build-version")
    file(READ "${prefix}/build-version" text)
    if(text MATCHES "\\+cu([0-9]+)([0-9])")
      set(version "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  elseif(EXISTS "${prefix}/version.py")
    file(STRINGS "${prefix}/version.py" line REGEX "^cuda")
    if(line MATCHES "'([0-9]+\\.[0-9]+)")
      set(version "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${out_var} "${version}" PARENT_SCOPE)
endfunction()

# OUT_VAR: why TOOLKIT_VERSION cannot serve a LibTorch built for TORCH_CUDA, or "" when it can
# (same major version, or either unknown).
function(mpibert_cuda_major_mismatch torch_cuda toolkit_version out_var)
  set(message "")
  string(REGEX MATCH "^[0-9]+" torch_major "${torch_cuda}")
  string(REGEX MATCH "^[0-9]+" toolkit_major "${toolkit_version}")
  if(torch_major AND toolkit_major AND NOT torch_major STREQUAL toolkit_major)
    set(message "the CUDA toolkit found (${toolkit_version}) is not the CUDA ${torch_major} that LibTorch was built "
                "for (${torch_cuda}): the program would load two CUDA runtimes. Point CMake at a CUDA ${torch_major} "
                "toolkit (-DCUDAToolkit_ROOT=..., `module load cuda/${torch_major}...`), or build against the PyTorch "
                "wheel (no -DTorch_DIR), which needs no toolkit")
  endif()
  set(${out_var} "${message}" PARENT_SCOPE)
endfunction()
