# SOFTHCA_SANITIZE=address gives ASan+UBSan, =thread gives TSan. Applied to every target.
if(SOFTHCA_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(SOFTHCA_SANITIZE STREQUAL "thread")
  # GCC 12 reports -Wnull-dereference false positives inside libstdc++ (std::string moves inlined
  # into CLI11's helpers) once TSan instruments -O2 code; keep them warnings in this preset only.
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -Wno-error=null-dereference)
  add_link_options(-fsanitize=thread)
elseif(NOT SOFTHCA_SANITIZE STREQUAL "none")
  message(FATAL_ERROR "SOFTHCA_SANITIZE must be none, address or thread")
endif()
