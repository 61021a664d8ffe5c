# ctest dist.nccl_backend_compiles: compiles src/dist/process_group.cpp with
# USE_C10D_NCCL (target nccl_compile_check) and checks that the object refers
# to c10d::ProcessGroupNCCL, i.e. the nccl branch was compiled, not skipped.
# -DBUILD_DIR=<build dir> -DOBJECTS=<the target's object files>
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target nccl_compile_check
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the nccl backend of src/dist/process_group.cpp does not compile (output above)")
endif()
execute_process(COMMAND nm -C ${OBJECTS} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm could not read ${OBJECTS}")
endif()
string(REGEX MATCHALL "c10d::ProcessGroupNCCL::[A-Za-z_]+" refs "${syms}")
list(REMOVE_DUPLICATES refs)
list(LENGTH refs n)
if(n EQUAL 0)
  message(FATAL_ERROR "process_group.cpp compiled with USE_C10D_NCCL refers to no c10d::ProcessGroupNCCL symbol: "
                      "the nccl branch was not compiled")
endif()
message(STATUS "the nccl backend compiles; the object refers to ${n} ProcessGroupNCCL symbols: ${refs}")
