# cudalloc_export_only(TARGET MAP): link the shared library TARGET with the version script MAP,
# which names the symbols it exports and keeps every other one local, and relink when MAP
# changes. Code is compiled with hidden visibility too, but that does not cover the C++
# standard library template instances a library emits: only the script keeps them from
# interposing the process's own copies (tests/check_library_exports.sh checks the result).
function(cudalloc_export_only target map)
  target_link_options(${target} PRIVATE -Wl,--version-script=${map})
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${map})
endfunction()
