# Writes OUT: a C++ file defining ipu::report::kPageTemplate as the text of IN (a raw string).
file(READ ${IN} content)
string(FIND "${content}" ")IPUPAGE\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )IPUPAGE\"")
endif()
file(WRITE ${OUT} "// Generated from page.html by embed_page.cmake; do not edit.\n"
                  "namespace ipu::report {\n"
                  "extern const char* const kPageTemplate;\n"
                  "const char* const kPageTemplate = R\"IPUPAGE(${content})IPUPAGE\";\n"
                  "}  // namespace ipu::report\n")
