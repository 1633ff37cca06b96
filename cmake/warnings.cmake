# Warnings for every softhca target, errors when SOFTHCA_WERROR is on.
add_library(softhca_warnings INTERFACE)
target_compile_options(softhca_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused
  -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough
  $<$<BOOL:${SOFTHCA_WERROR}>:-Werror>)
