# bench_ops_cuda: CUDA kernel microbenchmarks (plain main). Included from bench/CMakeLists.txt
# under PEREGRINE_CUDA, and by scripts/gpu_suite.sh's fallback project.
add_executable(bench_ops_cuda ${CMAKE_CURRENT_LIST_DIR}/ops_cuda_bench.cpp)
target_link_libraries(bench_ops_cuda PRIVATE pg_ops_cuda)
target_compile_options(bench_ops_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PG_WARNINGS}>)
set_target_properties(bench_ops_cuda PROPERTIES CUDA_ARCHITECTURES 90a-real)
