# Writes OUT: a C++ file defining ipu::harness::${SYMBOL} as the text of IN (a raw string), so
# the harness carries its rules without reading the source tree at run time.
file(READ ${IN} content)
string(FIND "${content}" ")IPURULES\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )IPURULES\"")
endif()
file(WRITE ${OUT} "// Generated from ${NAME} by embed_json.cmake; do not edit.\n"
                  "namespace ipu::harness {\n"
                  "extern const char* const ${SYMBOL};\n"
                  "const char* const ${SYMBOL} = R\"IPURULES(${content})IPURULES\";\n"
                  "}  // namespace ipu::harness\n")
