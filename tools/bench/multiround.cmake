# kvtier-bench multiround's simulator: the model-only device, the engine
# model, the workload, the compared systems and the reports. A library, so
# tests/bench links the same code the subcommand runs. Included by
# CMakeLists.txt before it creates kvtier-bench; takes its files out of the
# subcommand glob.
set(KVTIER_BENCH_SIM_FILES
  engine_model.cc hw_profile.cc kv_backends.cc mr_report.cc svg_plot.cc
  systems.cc virtual_ticker.cc workload.cc)
list(TRANSFORM KVTIER_BENCH_SIM_FILES PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
list(REMOVE_ITEM KVTIER_BENCH_SOURCES ${KVTIER_BENCH_SIM_FILES})
# The model-only device is compiled here until kvtier_runtime globs
# runtime/device/model (a static library's copy is then simply not pulled in).
add_library(kvtier_bench_sim STATIC ${KVTIER_BENCH_SIM_FILES}
  ${PROJECT_SOURCE_DIR}/runtime/device/model/model_device.cc)
kvtier_target_defaults(kvtier_bench_sim)
target_link_libraries(kvtier_bench_sim PUBLIC kvtier_runtime)
target_compile_definitions(kvtier_bench_sim PUBLIC KVTIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
