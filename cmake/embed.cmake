# embed.cmake — files carried inside the binaries as C arrays, so nothing
# reads the source tree at run time: the harnesses (harness/), the MCP tool
# catalog (schemas/), the browser console (console/), and, through sbx_embed_bytes, the migrations
# (embed_migrations.cmake).
#
# As a script:
#   cmake -DOUT=gen.c -DDIR=<dir> -DFILES=a.py,b.json -DVARS=var_a,var_b -P embed.cmake
# writes `const char var_a[] = {..., 0};` (NUL-terminated) for each file of
# DIR. A .json file must parse (string(JSON), CMake 3.19 and later): a
# malformed one fails the build, not the daemon at run time.

# The bytes of path as a C initializer, "{0x..,0x.., 0}", in ret.
function(sbx_embed_bytes path ret)
  file(READ ${path} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  set(${ret} "{${hex} 0}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  string(REPLACE "," ";" files "${FILES}")
  string(REPLACE "," ";" vars "${VARS}")
  list(LENGTH files n)
  list(LENGTH vars nv)
  if(NOT n EQUAL nv OR n EQUAL 0)
    message(FATAL_ERROR "embed.cmake: FILES and VARS must name as many entries (got ${n} and ${nv})")
  endif()
  set(body "/* generated from ${DIR} by cmake/embed.cmake — do not edit */\n\n")
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    list(GET files ${i} f)
    list(GET vars ${i} var)
    if(f MATCHES "\\.json$" AND CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
      file(READ ${DIR}/${f} text)
      string(JSON type ERROR_VARIABLE err TYPE "${text}")
      if(err)
        message(FATAL_ERROR "${DIR}/${f} is not valid JSON: ${err}")
      endif()
    endif()
    sbx_embed_bytes(${DIR}/${f} bytes)
    string(APPEND body "const char ${var}[] = ${bytes};\n")
  endforeach()
  file(WRITE ${OUT}.tmp "${body}")
  file(RENAME ${OUT}.tmp ${OUT})
endif()
