# kvtier-bench multiround's simulator: the model-only device, the engine
# model, the workload, the compared systems and the reports, and the
# command-line parser every subcommand uses (bench_args). A library, so
# tests/bench links the same code the subcommands run. Included by
# CMakeLists.txt before it creates kvtier-bench; takes its files out of the
# subcommand glob.
set(KVTIER_BENCH_SIM_FILES
  bench_args.cc engine_model.cc hw_profile.cc kv_backends.cc mr_report.cc svg_plot.cc
  systems.cc virtual_ticker.cc workload.cc)
list(TRANSFORM KVTIER_BENCH_SIM_FILES PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
list(REMOVE_ITEM KVTIER_BENCH_SOURCES ${KVTIER_BENCH_SIM_FILES})
# The model-only device (runtime/device/model) is compiled here: only the
# bench and its tests run it, so kvtier_runtime leaves it out.
add_library(kvtier_bench_sim STATIC ${KVTIER_BENCH_SIM_FILES}
  ${PROJECT_SOURCE_DIR}/runtime/device/model/model_device.cc)
kvtier_target_defaults(kvtier_bench_sim)
target_link_libraries(kvtier_bench_sim PUBLIC kvtier_runtime)
target_compile_definitions(kvtier_bench_sim PUBLIC KVTIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
