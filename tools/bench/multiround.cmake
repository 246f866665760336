# kvtier-bench multiround's simulator: the model-only device, the engine
# model, the workload, the compared systems and the reports, the
# command-line parser every subcommand uses (bench_args) and what memory
# given back costs on this machine (host_memory, spill's); and the
# --endpoint client. Libraries, so tests/bench links the same code the
# subcommands run. Included by CMakeLists.txt before it creates
# kvtier-bench; takes their files out of the subcommand glob.
set(KVTIER_BENCH_SIM_FILES
  bench_args.cc engine_model.cc host_memory.cc hw_profile.cc kv_backends.cc model_device.cc
  mr_report.cc svg_plot.cc systems.cc virtual_ticker.cc workload.cc)
list(TRANSFORM KVTIER_BENCH_SIM_FILES PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
list(REMOVE_ITEM KVTIER_BENCH_SOURCES ${KVTIER_BENCH_SIM_FILES})
# The model-only device (model_device.h) lives here, not in runtime/: only
# the bench and its tests run it.
add_library(kvtier_bench_sim STATIC ${KVTIER_BENCH_SIM_FILES})
kvtier_target_defaults(kvtier_bench_sim)
target_link_libraries(kvtier_bench_sim PUBLIC kvtier_runtime kvtier_policies)
target_compile_definitions(kvtier_bench_sim PUBLIC KVTIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# multiround --endpoint: the OpenAI-compatible client (Boost.Beast, the
# slowest file of the tree to compile) and the runs it records. A library
# so that it compiles once for kvtier-bench and tests/bench alike.
set(KVTIER_BENCH_ENDPOINT_FILES endpoint_run.cc openai_client.cc)
list(TRANSFORM KVTIER_BENCH_ENDPOINT_FILES PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
list(REMOVE_ITEM KVTIER_BENCH_SOURCES ${KVTIER_BENCH_ENDPOINT_FILES})
add_library(kvtier_bench_endpoint STATIC ${KVTIER_BENCH_ENDPOINT_FILES})
kvtier_target_defaults(kvtier_bench_endpoint)
target_link_libraries(kvtier_bench_endpoint PUBLIC kvtier_bench_sim nlohmann_json::nlohmann_json)
