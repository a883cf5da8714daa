# Installs headers, library, CLI, a CMake package (find_package(volt)) and a pkg-config file.
include(CMakePackageConfigHelpers)

install(DIRECTORY include/volt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS volt volt_headers EXPORT voltTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS volt_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT voltTargets NAMESPACE volt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/volt)

configure_package_config_file(cmake/voltConfig.cmake.in
  ${CMAKE_BINARY_DIR}/voltConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/volt)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/voltConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/voltConfig.cmake ${CMAKE_BINARY_DIR}/voltConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/volt)

configure_file(cmake/volt.pc.in ${CMAKE_BINARY_DIR}/volt.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/volt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
