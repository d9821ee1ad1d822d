# check_boundaries.cmake — which files may include which third-party library (issue 19), that
# only src/docker/ includes the Docker client (issue 26), and who names the microVM engine.
#
# CMake links each library PRIVATE to the module that owns it (CMakeLists.txt), but the headers
# sit in /usr/include, where every file could include them. This script closes that gap: run by
# the build (cmake -DROOT=<source dir> -DOUT=<stamp> -P check_boundaries.cmake), it fails when a
# file under src/ or include/ includes a library's header outside the module that owns it. The
# public headers (include/sandboxd/) may include none of them: owners expose opaque types.
#
# Each rule: a regex on the #include line, then a regex on the file's path under ROOT (a module
# of several files has its folder, src/<module>/; CMakeLists.txt names the same folders).
set(rules
    "<curl/" "^src/(docker/.*|kubernetes/.*|mcp/mcp_api_https\\.c|webhook/.*)$" # the Docker client; the Kubernetes engine; the MCP adapter's HTTPS client; the webhook sender (webhook.h)
    "<yaml\\.h>" "^src/kubernetes/.*$" # kubeconfig (engine_kubernetes.h)
    "<sqlite3\\.h>" "^src/store/.*$"
    "<microhttpd\\.h>" "^src/(http|e2b)/.*$" # the HTTPS front and E2B's protocols on it (e2b.h)
    "<gnutls/" "^src/(http|e2b)/.*$"
    "<event2/" "^src/(gateway|egress)/.*$"
    "<http_parser\\.h>" "^src/egress/.*$"
    "<zlib\\.h>" "^src/egress/egress_tls\\.c$" # a secret host's gzip response, decoded to be masked
    "<openssl/" "^src/((sha256|utf8|websocket|secrets|secrets_ca)\\.c|node/.*|egress/egress_tls\\.c)$" # the node link's TLS (node.h); the egress proxy's interception (issue 37)
    "<archive(_entry)?\\.h>" "^src/snapshot/snapshot_archive\\.c$" # workspace snapshots (issue 28)
    # the engine seam (issue 26): Docker's client is src/docker/'s own; everyone else calls
    # engine.h, and only the wiring names the Docker engine (engine_docker.h)
    "[\"<]sandboxd/docker\\.h[\">]" "^src/docker/.*$"
    # the microVM engine (issue 35): only the wiring names it; the session and snapshot code call
    # the seam (engine.h: the memory ops behind ENGINE_CAP_MEMORY_CAPTURE, engine_microvm_*)
    "[\"<]sandboxd/engine_qemu\\.h[\">]" "^src/(qemu/.*|engine_select\\.c|daemon\\.c)$")

file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/src/*.c ${ROOT}/src/*.h ${ROOT}/include/*.h)
set(bad "")
foreach(f ${files})
  file(STRINGS ${ROOT}/${f} lines REGEX "^[ \t]*#[ \t]*include")
  if(NOT lines)
    continue()
  endif()
  set(i 0)
  list(LENGTH rules n)
  while(i LESS n)
    list(GET rules ${i} header)
    math(EXPR j "${i} + 1")
    list(GET rules ${j} allowed)
    math(EXPR i "${i} + 2")
    foreach(line IN LISTS lines)
      if(line MATCHES "${header}" AND NOT f MATCHES "${allowed}")
        string(STRIP "${line}" line)
        string(APPEND bad "  ${f}: ${line} (allowed only in ${allowed})\n")
      endif()
    endforeach()
  endwhile()
endforeach()
if(bad)
  message(FATAL_ERROR "A library's header is included outside the module that owns it:\n${bad}"
                      "Call the owner's API instead (see cmake/check_boundaries.cmake).")
endif()
file(WRITE ${OUT} "ok\n")
