# The generated CUDA source against the LLVM backend, through the emulation.
add_executable(test_cuda_backend ${ROOT}/tests/cuda/test_backend.c)
target_link_libraries(test_cuda_backend xf_codegen xf_runtime)
target_include_directories(test_cuda_backend PRIVATE ${ROOT}/tests)
target_compile_definitions(test_cuda_backend PRIVATE XF_STDLIB_DIR="${ROOT}/stdlib")
add_test(NAME cuda_backend COMMAND test_cuda_backend WORKING_DIRECTORY ${ROOT})
add_test(NAME cuda_cli COMMAND bash ${ROOT}/tests/cuda/run_cli.sh $<TARGET_FILE:xfc> $<TARGET_FILE:xfrun> WORKING_DIRECTORY ${ROOT})
set_tests_properties(cuda_cli PROPERTIES SKIP_RETURN_CODE 77)
# --accum and --clip on the emulated device against the CPU
add_test(NAME cuda_recipe COMMAND bash ${ROOT}/tests/cuda/run_recipe.sh $<TARGET_FILE:xfc> $<TARGET_FILE:xfrun> WORKING_DIRECTORY ${ROOT})
set_tests_properties(cuda_recipe PROPERTIES SKIP_RETURN_CODE 77)
# The same comparisons on a real GPU; "skipped: no GPU" where there is none.
add_test(NAME cuda_gpu COMMAND test_cuda_backend --gpu WORKING_DIRECTORY ${ROOT})
# Under ASan the CUDA driver maps memory in the shadow gap and keeps
# allocations to exit: without these options cudaGetDeviceCount fails and the
# test would skip on a machine that has a GPU.
set_tests_properties(cuda_gpu PROPERTIES SKIP_RETURN_CODE 77
                     ENVIRONMENT "ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:abort_on_error=1")
