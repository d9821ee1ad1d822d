# check_api_doc.cmake — the unit test unit_docs_api: docs/api.md, checked in, must be the
# file the build generates (GENERATED, from docs/api.md.in, the API method table and
# schemas/mcp_tools.json by sandboxd-apidoc). Run with -DGENERATED=... -DCHECKED_IN=... -P.
file(READ "${GENERATED}" gen)
if(NOT EXISTS "${CHECKED_IN}")
  message(FATAL_ERROR "${CHECKED_IN} is missing: run `cmake --build <build dir> --target update-api-doc`")
endif()
file(READ "${CHECKED_IN}" old)
if(NOT gen STREQUAL old)
  message(FATAL_ERROR "docs/api.md is out of date with the method table or schemas/mcp_tools.json: "
                      "run `cmake --build <build dir> --target update-api-doc` and commit docs/api.md")
endif()
message(STATUS "docs/api.md is up to date")
