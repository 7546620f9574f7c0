# Sourced by the build scripts: compiler caches hit from any checkout of the tree, so a CI clone
# reuses what this one compiled. ccache hashes the working directory of a compile that writes
# debug information unless told not to; the objects' debug information may then name the
# directory of the checkout that first compiled them (gdb still finds the sources relative to it).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
