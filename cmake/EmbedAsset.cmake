# Turns a text asset (the coordinator's fleet page) into a C++ source defining one
# std::string_view, so the binary serves it with no file beside it:
#   cmake -DIN=page.html -DOUT=page_html.cc -DNAME=kPageHtml -P EmbedAsset.cmake
file(READ ${IN} content)
string(FIND "${content}" ")wcasset\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )wcasset\"")
endif()
file(WRITE ${OUT}
  "// Generated from ${IN} by cmake/EmbedAsset.cmake: edit the source, not this file.\n"
  "#include <string_view>\n\nnamespace weightcast::assets {\n"
  "extern const std::string_view ${NAME};\n"
  "const std::string_view ${NAME} = R\"wcasset(${content})wcasset\";\n"
  "}  // namespace weightcast::assets\n")
