# Writes OUT: a C++ file defining ${NAMESPACE}::${SYMBOL} (const char*) as the text of IN, a raw
# string, so a program carries a file of the source tree (a page template, a rules file) without
# reading the tree at run time. Run with cmake -DIN= -DOUT= -DNAME= -DNAMESPACE= -DSYMBOL= -P.
file(READ ${IN} content)
string(FIND "${content}" ")IPUTEXT\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )IPUTEXT\"")
endif()
file(WRITE ${OUT} "// Generated from ${NAME} by cmake/embed_text.cmake; do not edit.\n"
                  "namespace ${NAMESPACE} {\n"
                  "extern const char* const ${SYMBOL};\n"
                  "const char* const ${SYMBOL} = R\"IPUTEXT(${content})IPUTEXT\";\n"
                  "}  // namespace ${NAMESPACE}\n")
