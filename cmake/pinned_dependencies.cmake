# The small libraries a cluster seldom provides as modules (PCRE2: its 32-bit library, which
# distributions build but do not always install the headers of), pinned: where find_package does not find
# one, the build builds it from the release archive named here, checked against its SHA-256
# (cmake/mpibertDependencies.cmake, FetchContent). Debian 12's versions, so that a build without
# root compiles against what the apt build does. The archives are Debian's source archives
# (orig tarballs), upstream's release as Debian took it: nlohmann-json's and utf8proc's are
# GitHub's release tarballs byte for byte; the "+ds" ones are repacked by Debian without what it
# takes from elsewhere (spdlog's bundled copy of fmt, which this build does not use). Debian's
# archive keeps them while Debian 12 is supported, and snapshot.debian.org by their SHA-1 after.
#
#   included by the build: MPIBERT_PINNED (the names), MPIBERT_PINNED_<name>_{VERSION,FILE,SHA256},
#     mpibert_pinned_urls(name out): MPIBERT_DEPENDENCY_ARCHIVES/FILE where that folder holds it (a
#     copy for machines without network), else Debian's archive, then snapshot.debian.org.
#   as a script, downloads archives into a folder (scripts/install-deps.sh, tests that offer the
#   archives from a local folder); one already there with the right SHA-256 is kept:
#     cmake -DMPIBERT_DEPENDENCY_ARCHIVES=DIR [-DNAMES="spdlog;fmt"] -P cmake/pinned_dependencies.cmake

set(MPIBERT_PINNED fmt spdlog CLI11 nlohmann_json utf8proc pcre2)

set(MPIBERT_PINNED_fmt_VERSION 9.1.0)
set(MPIBERT_PINNED_fmt_FILE "fmtlib_9.1.0+ds1.orig.tar.gz")
set(MPIBERT_PINNED_fmt_POOL "f/fmtlib")
set(MPIBERT_PINNED_fmt_SHA256 84ce1c2d0be3a9863935137969dcec6970125caac032f82474640bfc81463583)
set(MPIBERT_PINNED_fmt_SHA1 2ab667c92f2fc190c732afa926479815d2b2f981)

set(MPIBERT_PINNED_spdlog_VERSION 1.10.0)
set(MPIBERT_PINNED_spdlog_FILE "spdlog_1.10.0+ds.orig.tar.xz")
set(MPIBERT_PINNED_spdlog_POOL "s/spdlog")
set(MPIBERT_PINNED_spdlog_SHA256 620ca6842b5c21014470bd42eb4716024674214fb973b5ffa3aaea33310ad327)
set(MPIBERT_PINNED_spdlog_SHA1 be3d2252e16c7097eeaa8d7dd35c3278cfdf3bbf)

set(MPIBERT_PINNED_CLI11_VERSION 2.1.2)
set(MPIBERT_PINNED_CLI11_FILE "cli11_2.1.2+ds.orig.tar.xz")
set(MPIBERT_PINNED_CLI11_POOL "c/cli11")
set(MPIBERT_PINNED_CLI11_SHA256 8143d20b688e98ccce8e24562d3b68e5f47c12e896c42c7ca8553dbde5bed55d)
set(MPIBERT_PINNED_CLI11_SHA1 54bfb3159ed463e424e991f72815dc34c0ad1eeb)

set(MPIBERT_PINNED_nlohmann_json_VERSION 3.11.2)
set(MPIBERT_PINNED_nlohmann_json_FILE "nlohmann-json3_3.11.2.orig.tar.gz")
set(MPIBERT_PINNED_nlohmann_json_POOL "n/nlohmann-json3")
set(MPIBERT_PINNED_nlohmann_json_SHA256 d69f9deb6a75e2580465c6c4c5111b89c4dc2fa94e3a85fcd2ffcd9a143d9273)
set(MPIBERT_PINNED_nlohmann_json_SHA1 1b0701dc7fdc068aad8ce68fc3e019a038232437)

set(MPIBERT_PINNED_utf8proc_VERSION 2.8.0)
set(MPIBERT_PINNED_utf8proc_FILE "utf8proc_2.8.0.orig.tar.gz")
set(MPIBERT_PINNED_utf8proc_POOL "u/utf8proc")
set(MPIBERT_PINNED_utf8proc_SHA256 a0a60a79fe6f6d54e7d411facbfcc867a6e198608f2cd992490e46f04b1bcecc)
set(MPIBERT_PINNED_utf8proc_SHA1 7713007fde54cc8f8238936cae246c4ce30180f9)

set(MPIBERT_PINNED_pcre2_VERSION 10.42)
set(MPIBERT_PINNED_pcre2_FILE "pcre2_10.42.orig.tar.gz")
set(MPIBERT_PINNED_pcre2_POOL "p/pcre2")
set(MPIBERT_PINNED_pcre2_SHA256 c33b418e3b936ee3153de2c61cc638e7e4fe3156022a5c77d0711bcbb9d64f1f)
set(MPIBERT_PINNED_pcre2_SHA1 0c265c2e3b8325db8d87d06e8a4cc31ce4cbc731)

function(mpibert_pinned_urls name out)
  set(file "${MPIBERT_PINNED_${name}_FILE}")
  string(REPLACE "+" "%2B" escaped "${file}")
  # The folder's copy alone where there is one (ExternalProject takes a local file only as the
  # sole URL; its SHA-256 is checked all the same).
  if(MPIBERT_DEPENDENCY_ARCHIVES)
    get_filename_component(dir "${MPIBERT_DEPENDENCY_ARCHIVES}" ABSOLUTE)
    if(EXISTS "${dir}/${file}")
      set(${out} "${dir}/${file}" PARENT_SCOPE)
      return()
    endif()
  endif()
  set(${out} "https://deb.debian.org/debian/pool/main/${MPIBERT_PINNED_${name}_POOL}/${escaped}"
             "https://snapshot.debian.org/file/${MPIBERT_PINNED_${name}_SHA1}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT MPIBERT_DEPENDENCY_ARCHIVES)
    message(FATAL_ERROR "usage: cmake -DMPIBERT_DEPENDENCY_ARCHIVES=DIR [-DNAMES=\"spdlog;fmt\"] -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
  if(NOT DEFINED NAMES)
    set(NAMES ${MPIBERT_PINNED})
  endif()
  get_filename_component(archives "${MPIBERT_DEPENDENCY_ARCHIVES}" ABSOLUTE)
  file(MAKE_DIRECTORY "${archives}")
  # The downloads come from the network, not from the folder they go to.
  set(MPIBERT_DEPENDENCY_ARCHIVES "")
  foreach(name IN LISTS NAMES)
    if(NOT DEFINED MPIBERT_PINNED_${name}_FILE)
      message(FATAL_ERROR "no pinned release of ${name}: the names are ${MPIBERT_PINNED}")
    endif()
    set(target "${archives}/${MPIBERT_PINNED_${name}_FILE}")
    set(want "${MPIBERT_PINNED_${name}_SHA256}")
    if(EXISTS "${target}")
      file(SHA256 "${target}" have)
      if(have STREQUAL want)
        message("${name} ${MPIBERT_PINNED_${name}_VERSION}: ${target} (SHA-256 checked)")
        continue()
      endif()
      file(REMOVE "${target}")
    endif()
    # Into NAME.part, renamed once complete and checked: a failed download leaves no archive.
    mpibert_pinned_urls(${name} urls)
    set(done FALSE)
    foreach(url IN LISTS urls)
      file(DOWNLOAD "${url}" "${target}.part" STATUS status EXPECTED_HASH SHA256=${want} TLS_VERIFY ON)
      list(GET status 0 code)
      if(code EQUAL 0)
        file(RENAME "${target}.part" "${target}")
        message("${name} ${MPIBERT_PINNED_${name}_VERSION}: ${target} from ${url} (SHA-256 checked)")
        set(done TRUE)
        break()
      endif()
      list(GET status 1 why)
      message("${name}: ${url}: ${why}")
      file(REMOVE "${target}.part")
    endforeach()
    if(NOT done)
      message(FATAL_ERROR "${name} ${MPIBERT_PINNED_${name}_VERSION}: no URL gave ${MPIBERT_PINNED_${name}_FILE} with SHA-256 ${want}")
    endif()
  endforeach()
endif()
