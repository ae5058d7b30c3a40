# Compiler flags shared by every addnorm target, through the interface target addnorm_flags.
add_library(addnorm_flags INTERFACE)
target_compile_options(addnorm_flags INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                                               -Wno-sign-conversion)
if(ADDNORM_WERROR)
  target_compile_options(addnorm_flags INTERFACE -Werror)
endif()
if(ADDNORM_NATIVE)
  target_compile_options(addnorm_flags INTERFACE -march=native)
endif()
if(ADDNORM_SANITIZE)
  # -pipe: the instrumented SIMD targets' assembly is hundreds of MB; it goes through a pipe, not /tmp.
  target_compile_options(addnorm_flags INTERFACE -fsanitize=address,undefined -fno-sanitize-recover=all
                                                 -fno-omit-frame-pointer -pipe)
  target_link_options(addnorm_flags INTERFACE -fsanitize=address,undefined)
endif()
