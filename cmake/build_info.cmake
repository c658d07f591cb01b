# Writes OUT, a C++ file defining rkv::cli::build_commit(): the commit the sources at SOURCE_DIR
# are at (git's short hash, "-dirty" when tracked files differ from it; "unknown" outside a git
# checkout). Run at every build (CMakeLists.txt, rkv_build_info); the file is rewritten only when
# its text changes, so that nothing recompiles otherwise.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=7 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0 OR NOT changes STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "// Written by cmake/build_info.cmake at build time.\n#include \"build_info.h\"\n\nnamespace rkv::cli {\nconst char* build_commit() { return \"${commit}\"; }\n}  // namespace rkv::cli\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
