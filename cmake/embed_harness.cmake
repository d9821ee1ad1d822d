# Turn harness/run_tests.{py,js} into C strings for src/testrun.c (run_tests),
# the way embed_migrations.cmake embeds the migrations.
set(body "/* generated from harness/ — do not edit */\n#include <stddef.h>\n\n")
foreach(pair "py;testrun_harness_python" "js;testrun_harness_node")
  list(GET pair 0 ext)
  list(GET pair 1 var)
  file(READ ${DIR}/run_tests.${ext} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  string(APPEND body "const char ${var}[] = {${hex} 0};\n")
endforeach()
file(WRITE ${OUT}.tmp "${body}")
file(RENAME ${OUT}.tmp ${OUT})
