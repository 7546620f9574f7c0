# The launcher's wings and the arrows between them, written once: TRAINRUN_WING_USES_<wing> names
# the wings and libraries (lib/rendezvous, lib/stacks) that wing may include and links; lib/base
# is every wing's. The order is one in which each wing comes after what it uses. lib/launch's
# CMakeLists.txt builds a library per wing from this table and refuses any other include;
# docs/architecture.md draws the same arrows (the docs_wings test holds it to this table).
set(TRAINRUN_LAUNCH_WINGS
  core clusters rdzv output store preflight rollcall workers hosts agent cli)
set(TRAINRUN_WING_USES_core rendezvous)
set(TRAINRUN_WING_USES_clusters core)
set(TRAINRUN_WING_USES_rdzv core rendezvous)
set(TRAINRUN_WING_USES_output core rendezvous)
set(TRAINRUN_WING_USES_store core rendezvous)
set(TRAINRUN_WING_USES_preflight core rendezvous)
set(TRAINRUN_WING_USES_rollcall core stacks)
set(TRAINRUN_WING_USES_workers core output rdzv rendezvous stacks)
set(TRAINRUN_WING_USES_hosts core rdzv workers)
set(TRAINRUN_WING_USES_agent
  core hosts output preflight rdzv rendezvous rollcall stacks store workers)
set(TRAINRUN_WING_USES_cli core clusters hosts rdzv rendezvous)
