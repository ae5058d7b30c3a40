# Installs headers, the library, the CLI and a CMake package config so that another project can
#   find_package(addnorm CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE addnorm::addnorm)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/addnorm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
install(TARGETS addnorm EXPORT addnormTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(ADDNORM_BUILD_APPS)
  install(TARGETS addnorm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT addnormTargets NAMESPACE addnorm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/addnorm)
configure_package_config_file(cmake/addnormConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/addnormConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/addnorm)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/addnormConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/addnormConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/addnormConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/addnorm)
