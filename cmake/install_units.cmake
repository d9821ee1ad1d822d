# install_units.cmake — run by `cmake --install` (install(CODE) in CMakeLists.txt): writes the
# systemd units with the paths of *this* install, so `cmake --install build --prefix P` yields
# units that start P/bin/sandboxd with P's config. Inputs: SBX_SRC, SBX_BIN, SBX_BINDIR_REL,
# SBX_SYSCONFDIR_REL, SBX_UNITDIR (empty: <prefix>/lib/systemd/system). DESTDIR is honoured by
# file(INSTALL).
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(IS_ABSOLUTE "${SBX_BINDIR_REL}")
  set(SBX_BINDIR "${SBX_BINDIR_REL}")
else()
  set(SBX_BINDIR "${prefix}/${SBX_BINDIR_REL}")
endif()
# GNUInstallDirs: prefix /usr keeps its configuration in /etc.
if(IS_ABSOLUTE "${SBX_SYSCONFDIR_REL}")
  set(sysconf "${SBX_SYSCONFDIR_REL}")
elseif(prefix STREQUAL "/usr")
  set(sysconf "/etc")
else()
  set(sysconf "${prefix}/${SBX_SYSCONFDIR_REL}")
endif()
set(SBX_CONFIG "${sysconf}/sandboxd/sandboxd.conf")
if(SBX_UNITDIR)
  set(unitdir "${SBX_UNITDIR}")
else()
  set(unitdir "${prefix}/lib/systemd/system")
endif()

# In the build tree: an install script's CMAKE_CURRENT_BINARY_DIR is the directory cmake --install
# runs from, often the source tree.
set(gen "${SBX_BIN}/systemd-units")
file(MAKE_DIRECTORY "${gen}")
foreach(unit sandboxd.service sandboxd-gc.service)
  configure_file("${SBX_SRC}/systemd/${unit}.in" "${gen}/${unit}" @ONLY)
endforeach()
file(INSTALL "${gen}/sandboxd.service" "${gen}/sandboxd-gc.service" "${SBX_SRC}/systemd/sandboxd-gc.timer"
     DESTINATION "${unitdir}" FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

# The config is the operator's once installed: never overwrite it.
if(EXISTS "$ENV{DESTDIR}${SBX_CONFIG}")
  message(STATUS "Keeping: $ENV{DESTDIR}${SBX_CONFIG} (the shipped one is ${SBX_SRC}/etc/sandboxd.conf)")
else()
  file(INSTALL "${SBX_SRC}/etc/sandboxd.conf" DESTINATION "${sysconf}/sandboxd"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endif()
