# EMBER_SANITIZE="address;undefined" builds everything with those sanitizers (host code only).
if(EMBER_SANITIZE)
  list(JOIN EMBER_SANITIZE "," _ember_san)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_ember_san}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=${_ember_san})
endif()
