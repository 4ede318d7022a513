# Run by `cmake --install` (cmake/mpibertInstall.cmake, mpibert_install_wheel): copies the wheels'
# shared libraries that mpibert and mpibert-prep load (PyTorch's and its NVIDIA wheels', pyarrow's
# libarrow and libparquet) into MPIBERT_WHEEL_DEST, each at its path below the wheels'
# site-packages folder (torch/lib/..., nvidia/cu13/lib/..., pyarrow/...), where the installed
# programs' RUNPATH and the libraries' own ($ORIGIN/../../nvidia/..., $ORIGIN) find them; and the
# license files of the wheels copied from into MPIBERT_WHEEL_LICENSES. tools/container/stage.sh
# makes the image's /opt/mpibert with it.
#   MPIBERT_PROGRAMS     the programs in the build tree, whose RUNPATH names the wheel's folders
#   MPIBERT_WHEEL_SITE   the site-packages folder holding torch/, nvidia/ and pyarrow/
#   MPIBERT_WHEEL_DEST, MPIBERT_WHEEL_LICENSES   where they go (DESTDIR applies)
# The environment's MPIBERT_INSTALL_WHEEL_LIBS=all copies every library of torch/lib and
# nvidia/*/lib as well, with those CUDA opens on demand (cuDNN's engines, NVRTC, ...): GPU runs
# need them, a CPU run does not. (libtorch_python, torch's Python extension, is never copied: it
# needs a libpython.)

get_filename_component(site "${MPIBERT_WHEEL_SITE}" REALPATH)
set(wanted "")
if("$ENV{MPIBERT_INSTALL_WHEEL_LIBS}" STREQUAL "all")
  file(GLOB wanted RELATIVE "${site}" "${site}/torch/lib/*.so*" "${site}/nvidia/*/lib/*.so*")
  list(FILTER wanted EXCLUDE REGEX "/libtorch_python\\.so$")
endif()
# The loader's view (with "all" too: pyarrow's libraries are not in the globs above): each library
# found through the RUNPATHs of the programs and of the libraries that need it, as the dynamic
# loader searches them.
file(GET_RUNTIME_DEPENDENCIES EXECUTABLES ${MPIBERT_PROGRAMS}
  RESOLVED_DEPENDENCIES_VAR resolved UNRESOLVED_DEPENDENCIES_VAR unresolved)
if(unresolved)
  message(FATAL_ERROR "mpibert: the programs need libraries that were not found: ${unresolved}")
endif()
foreach(file IN LISTS resolved)
  # The folder resolved, not the file: a program asks for the name it was linked with.
  get_filename_component(dir "${file}" DIRECTORY)
  get_filename_component(name "${file}" NAME)
  get_filename_component(dir "${dir}" REALPATH)
  string(LENGTH "${site}/" length)
  string(SUBSTRING "${dir}/" 0 ${length} head)
  if(head STREQUAL "${site}/")
    file(RELATIVE_PATH below "${site}" "${dir}/${name}")
    list(APPEND wanted "${below}")
  endif()
endforeach()
if(NOT wanted)
  message(FATAL_ERROR "mpibert: no library of the wheel in ${site} is loaded by ${MPIBERT_PROGRAMS}")
endif()
list(REMOVE_DUPLICATES wanted)
list(SORT wanted)
set(bytes 0)
foreach(below IN LISTS wanted)
  get_filename_component(folder "${below}" DIRECTORY)
  file(INSTALL "${site}/${below}" DESTINATION "${MPIBERT_WHEEL_DEST}/${folder}" USE_SOURCE_PERMISSIONS MESSAGE_LAZY)
  file(SIZE "${site}/${below}" size)
  math(EXPR bytes "${bytes} + ${size} / 1048576")
endforeach()
list(LENGTH wanted count)
message(STATUS "mpibert: ${count} libraries of the wheel in ${site} (${bytes} MiB) in ${MPIBERT_WHEEL_DEST}")

# The licenses of what was copied: torch's, those of the NVIDIA wheels, and pyarrow's.
file(GLOB infos "${site}/torch-*.dist-info" "${site}/nvidia_*.dist-info" "${site}/pyarrow-*.dist-info")
foreach(info IN LISTS infos)
  get_filename_component(name "${info}" NAME)
  string(REGEX REPLACE "\\.dist-info$" "" name "${name}")
  file(GLOB_RECURSE licenses "${info}/LICENSE*" "${info}/NOTICE*" "${info}/License.txt")
  if(licenses)
    file(INSTALL ${licenses} DESTINATION "${MPIBERT_WHEEL_LICENSES}/${name}" MESSAGE_LAZY)
  endif()
endforeach()
